/*
 * test_model.c - the model loader (lib/engine/model.c) and the forward pass
 * (lib/engine/forward.c).
 *
 * Every test writes a tiny Llama-family GGUF (2 layers, dim 64, ff 96,
 * 4 query heads over 2 KV heads of 16, vocab 300, a small byte-level BPE
 * vocabulary) into a fresh temporary directory with the library's own
 * GGUF writer, with random weights from a fixed seed.
 *
 * The key test runs the forward pass against an independent reference
 * written here in double precision, straight from the definition of the
 * architecture: embedding, RMSNorm, Q/K/V (+ biases for qwen2), RoPE
 * (llama: adjacent pairs; qwen2: NeoX halves), causal grouped-query
 * attention, output projection, residual, RMSNorm, SwiGLU, residual,
 * final norm, output projection (tied to the embedding when output.weight
 * is absent). The reference sees the weights as the file stores them
 * (quantized formats dequantized), so for F32 files only the float
 * arithmetic of the forward pass differs, and for quantized files the
 * activation rounding (f16 or Q8) of the dot products adds to that.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats.h"
#include "ruvllm.h"
#include "ruvllm_tools.h"
#include "f16.h"
#include "engine/model.h"

/* ======================================================================
 * The tiny model's geometry
 * ====================================================================== */

enum {
    NL = 2,          /* block_count */
    E = 64,          /* embedding_length */
    FF = 96,         /* feed_forward_length */
    NH = 4,          /* attention.head_count */
    NKV = 2,         /* attention.head_count_kv */
    HD = E / NH,     /* head size 16 */
    QD = NH * HD,    /* 64 */
    KVD = NKV * HD,  /* 32 */
    V = 300,         /* vocabulary: 256 byte tokens + 44 merges */
    NCTX_TRAIN = 128,
    MAXT = 32,       /* longest sequence the reference runs */
};

/* ======================================================================
 * Temporary directory
 * ====================================================================== */

static char tmpdir[4096];

static int setup_tmpdir(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/rvl-test-model-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[8192];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
    }
    if (d)
        closedir(d);
    return rmdir(tmpdir);
}

static const char *tpath(const char *name)
{
    static char p[8192];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

/* ======================================================================
 * Deterministic random numbers (splitmix64)
 * ====================================================================== */

static uint64_t rng;

static uint64_t rnext(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float urand(void)
{
    return (float)((double)(rnext() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* ======================================================================
 * The weights: every tensor as source floats, the bytes the file stores
 * and those bytes dequantized (what the reference computes with).
 * ====================================================================== */

typedef struct {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[2];          /* ne[0] innermost; ne[1] = 1 for vectors */
    uint32_t type;
    void *data;              /* stored bytes (owned) */
    size_t nbytes;
    float *deq;              /* stored values as floats (owned) */
} ttensor;

typedef struct {
    ttensor t[64];
    int n;
    uint32_t wtype;
    bool bias, tied;
} tmodel;

/* Every buffer tm_add allocates, so that a test that fails half-way
 * (cmocka longjmps out of it) leaks nothing: teardown frees the rest. */
static void *live[512];

static void *tm_alloc(size_t n)
{
    void *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        if (!live[i]) {
            live[i] = p;
            return p;
        }
    fail_msg("too many test buffers");
    return NULL;
}

static void tm_release(void *p)
{
    for (size_t i = 0; p && i < sizeof live / sizeof live[0]; i++)
        if (live[i] == p)
            live[i] = NULL;
    free(p);
}

static int free_live(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++) {
        free(live[i]);
        live[i] = NULL;
    }
    return 0;
}

/* Add a tensor of ne0 x ne1 values drawn uniformly from offset +- scale,
 * stored as `type`. */
static void tm_add(tmodel *m, const char *name, uint64_t ne0, uint64_t ne1, uint32_t type,
                   float offset, float scale)
{
    assert_true(m->n < (int)(sizeof m->t / sizeof m->t[0]));
    ttensor *t = &m->t[m->n++];
    const rvl_kformat *kf = rvl_kformat_get(type);
    uint64_t n = ne0 * ne1;
    float *src = malloc(n * sizeof *src);

    assert_non_null(kf);
    assert_non_null(kf->quantize);
    assert_non_null(src);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->type = type;
    for (uint64_t i = 0; i < n; i++)
        src[i] = offset + scale * urand();
    t->nbytes = (size_t)(rvl_kformat_row_bytes(kf, ne0) * ne1);
    t->data = tm_alloc(t->nbytes);
    t->deq = tm_alloc(n * sizeof *t->deq);
    for (uint64_t r = 0; r < ne1; r++) {
        char *row = (char *)t->data + r * rvl_kformat_row_bytes(kf, ne0);
        kf->quantize(src + r * ne0, row, (int64_t)ne0, NULL);
        kf->dequantize(row, t->deq + r * ne0, (int64_t)ne0);
    }
    free(src);
}

/* Per-tensor types for a mixed model (as llama.cpp's Q4_K_M mixes them):
 * {tensor name suffix, type} pairs, or NULL for one type throughout. */
typedef struct {
    const char *suffix;
    uint32_t type;
} type_rule;
static const type_rule *mixed;

static uint32_t matrix_type(const char *name, uint32_t wtype)
{
    for (const type_rule *r = mixed; r && r->suffix; r++)
        if (strstr(name, r->suffix))
            return r->type;
    return wtype;
}

/* Build the weights of the tiny model with matrices stored as `wtype`
 * (norms and biases stay F32, as converters write them). */
static void tm_build(tmodel *m, uint32_t wtype, bool bias, bool tied, uint64_t seed)
{
    char nm[64];
    memset(m, 0, sizeof *m);
    m->wtype = wtype;
    m->bias = bias;
    m->tied = tied;
    rng = seed;
    /* matrices: variance 1/fan_in so activations stay around unit size */
    const float se = sqrtf(3.0f / E), sf = sqrtf(3.0f / FF);
    tm_add(m, "token_embd.weight", E, V, matrix_type("token_embd", wtype), 0, 1);
    tm_add(m, "output_norm.weight", E, 1, RVL_TYPE_F32, 1, 0.2f);
    if (!tied)
        tm_add(m, "output.weight", E, V, matrix_type("output.weight", wtype), 0, 2 * se);
    for (int l = 0; l < NL; l++) {
#define T(suffix, a, b, type, off, sc)                   \
    do {                                                 \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix); \
        tm_add(m, nm, a, b, matrix_type(nm, type), off, sc); \
    } while (0)
        T("attn_norm.weight", E, 1, RVL_TYPE_F32, 1, 0.2f);
        T("attn_q.weight", E, QD, wtype, 0, se);
        T("attn_k.weight", E, KVD, wtype, 0, se);
        T("attn_v.weight", E, KVD, wtype, 0, se);
        if (bias) {
            T("attn_q.bias", QD, 1, RVL_TYPE_F32, 0, 0.5f);
            T("attn_k.bias", KVD, 1, RVL_TYPE_F32, 0, 0.5f);
            T("attn_v.bias", KVD, 1, RVL_TYPE_F32, 0, 0.5f);
        }
        T("attn_output.weight", QD, E, wtype, 0, se);
        T("ffn_norm.weight", E, 1, RVL_TYPE_F32, 1, 0.2f);
        T("ffn_gate.weight", E, FF, wtype, 0, 2 * se);
        T("ffn_up.weight", E, FF, wtype, 0, se);
        T("ffn_down.weight", FF, E, wtype, 0, sf);
#undef T
    }
}

static void tm_free(tmodel *m)
{
    for (int i = 0; i < m->n; i++) {
        tm_release(m->t[i].data);
        tm_release(m->t[i].deq);
    }
    m->n = 0;
}

static const ttensor *tm_tensor(const tmodel *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const ttensor *tm_tensor(const tmodel *m, const char *fmt, ...)
{
    char nm[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nm, sizeof nm, fmt, ap);
    va_end(ap);
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, nm) == 0)
            return &m->t[i];
    fail_msg("no tensor %s in the test model", nm);
    return NULL;
}

#define tm_get(m, ...) (tm_tensor(m, __VA_ARGS__)->deq)

/* ======================================================================
 * Writing the GGUF file
 * ====================================================================== */

typedef struct {
    const char *arch;         /* general.architecture (NULL: "llama") */
    const char *omit;         /* a metadata key or tensor left out */
    const char *reshape;      /* a tensor written with a wrong shape */
    const char *retype;       /* a tensor written as I32 */
    uint32_t n_head_kv;       /* head_count_kv written (0: NKV) */
    uint32_t vocab_size;      /* <arch>.vocab_size (0: absent) */
    const char *rope_scaling; /* <arch>.rope.scaling.type (NULL: absent) */
    float rope_factor;        /* <arch>.rope.scaling.factor (0: absent) */
    float rope_base;          /* <arch>.rope.freq_base (0: 10000) */
    uint32_t rope_dim;        /* <arch>.rope.dimension_count (0: absent) */
    bool no_rope_base;        /* leave rope.freq_base out (default 10000) */
    uint32_t yarn_orig_ctx;   /* <arch>.rope.scaling.original_context_length (0: absent) */
    uint32_t extra_tokens;    /* tokens beyond token_embd's rows */
    uint32_t fewer_tokens;    /* tokens missing from the list (rows without one) */
    float rope_factor_raw;    /* written as is, even when not finite (0: unused) */
    const char *f32_key;      /* one more <arch>.KEY = f32_val (NULL: none) */
    float f32_val;
    const char *u32_key;      /* one more <arch>.KEY = u32_val (NULL: none) */
    uint32_t u32_val;
    const char *extra_tensor; /* one more F32 tensor of HD values (NULL: none) */
} spec;

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves,
 * the others to 256, 257, ... in byte order. */
static uint32_t byte_cp(unsigned b)
{
    static uint32_t map[256];
    static bool init;
    if (!init) {
        uint32_t n = 0;
        for (unsigned i = 0; i < 256; i++) {
            bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
            map[i] = printable ? i : 256 + n++;
        }
        init = true;
    }
    return map[b];
}

static size_t put_utf8(char *s, uint32_t cp)
{
    if (cp < 0x80) {
        s[0] = (char)cp;
        return 1;
    }
    s[0] = (char)(0xC0 | cp >> 6);
    s[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Vocabulary: the 256 byte tokens, then the 44 results of merges
 * "<letter> e" and "<letter> o" (letters a..v). */
enum { MAX_EXTRA = 16 };
typedef struct {
    char text[V + MAX_EXTRA][8];
    rvl_str tokens[V + MAX_EXTRA];
    int32_t types[V + MAX_EXTRA];
    char mtext[V - 256][8];
    rvl_str merges[V - 256];
} vocab;

static void vocab_build(vocab *vb)
{
    for (unsigned b = 0; b < 256; b++) {
        size_t n = put_utf8(vb->text[b], byte_cp(b));
        vb->tokens[b] = (rvl_str){vb->text[b], n};
    }
    for (int i = 0; i < V - 256; i++) {
        char l = (char)('a' + i % 22), r = i < 22 ? 'e' : 'o';
        int id = 256 + i;
        vb->text[id][0] = l;
        vb->text[id][1] = r;
        vb->tokens[id] = (rvl_str){vb->text[id], 2};
        vb->mtext[i][0] = l;
        vb->mtext[i][1] = ' ';
        vb->mtext[i][2] = r;
        vb->merges[i] = (rvl_str){vb->mtext[i], 3};
    }
    for (int i = V; i < V + MAX_EXTRA; i++) {
        int n = snprintf(vb->text[i], sizeof vb->text[i], "<x%d>", i - V);
        vb->tokens[i] = (rvl_str){vb->text[i], (uint64_t)n};
    }
    for (int i = 0; i < V + MAX_EXTRA; i++)
        vb->types[i] = RVL_TOK_NORMAL;
}

static bool omitted(const spec *s, const char *name)
{
    return s->omit && strcmp(s->omit, name) == 0;
}

/* Write `m` as a GGUF model at `path`, with the deviations `s` asks for.
 * Returns the writer's result. */
static int write_model(const char *path, const tmodel *m, const spec *s)
{
    const char *A = s->arch ? s->arch : "llama";
    rvl_gguf_writer *w;
    assert_true(s->extra_tokens <= MAX_EXTRA);
    vocab *vb = malloc(sizeof *vb);
    char key[128];
    int rc;

    assert_non_null(vb);
    vocab_build(vb);
    rc = rvl_gguf_writer_open(&w, path);
    assert_int_equal(rc, 0);

#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
#define U32(k, v)                                       \
    do {                                                \
        const char *k_ = (k);                           \
        if (!omitted(s, k_))                            \
            assert_int_equal(rvl_gguf_writer_kv_u32(w, k_, v), 0); \
    } while (0)
#define F32(k, v)                                       \
    do {                                                \
        const char *k_ = (k);                           \
        if (!omitted(s, k_))                            \
            assert_int_equal(rvl_gguf_writer_kv_f32(w, k_, v), 0); \
    } while (0)
#define STR(k, v)                                       \
    do {                                                \
        const char *k_ = (k);                           \
        if (!omitted(s, k_))                            \
            assert_int_equal(rvl_gguf_writer_kv_str(w, k_, v), 0); \
    } while (0)

    STR("general.architecture", A);
    STR("general.name", "tiny test model");
    U32(KEY("block_count"), NL);
    U32(KEY("context_length"), NCTX_TRAIN);
    U32(KEY("embedding_length"), E);
    U32(KEY("feed_forward_length"), FF);
    U32(KEY("attention.head_count"), NH);
    U32(KEY("attention.head_count_kv"), s->n_head_kv ? s->n_head_kv : NKV);
    F32(KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (!s->no_rope_base)
        F32(KEY("rope.freq_base"), s->rope_base ? s->rope_base : 10000.0f);
    if (s->rope_dim)
        U32(KEY("rope.dimension_count"), s->rope_dim);
    if (s->rope_scaling)
        STR(KEY("rope.scaling.type"), s->rope_scaling);
    if (s->rope_factor)
        F32(KEY("rope.scaling.factor"), s->rope_factor);
    if (s->rope_factor_raw != 0)
        F32(KEY("rope.scaling.factor"), s->rope_factor_raw);
    if (s->yarn_orig_ctx)
        U32(KEY("rope.scaling.original_context_length"), s->yarn_orig_ctx);
    if (s->vocab_size)
        U32(KEY("vocab_size"), s->vocab_size);
    if (s->f32_key)
        F32(KEY(s->f32_key), s->f32_val);
    if (s->u32_key)
        U32(KEY(s->u32_key), s->u32_val);
    STR("tokenizer.ggml.model", "gpt2");
    STR("tokenizer.ggml.pre", "gpt-2");
    if (!omitted(s, "tokenizer.ggml.tokens"))
        assert_int_equal(rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.tokens", vb->tokens,
                                                    V + s->extra_tokens - s->fewer_tokens), 0);
    if (!omitted(s, "tokenizer.ggml.token_type"))
        assert_int_equal(rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", RVL_GGUF_I32,
                                                vb->types, V + s->extra_tokens - s->fewer_tokens), 0);
    if (!omitted(s, "tokenizer.ggml.merges"))
        assert_int_equal(rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.merges", vb->merges,
                                                    V - 256), 0);
#undef KEY
#undef U32
#undef F32
#undef STR

    for (int i = 0; i < m->n; i++) {
        const ttensor *t = &m->t[i];
        uint64_t ne[2] = {t->ne[0], t->ne[1]};
        uint32_t type = t->type;
        if (omitted(s, t->name))
            continue;
        if (s->reshape && strcmp(s->reshape, t->name) == 0) {
            /* fewer or as many elements as stored, so t->data suffices */
            assert_int_equal(t->type, RVL_TYPE_F32);
            if (t->n_dims == 1) {
                ne[0] /= 2;
            } else if (ne[0] != ne[1]) {
                ne[0] = t->ne[1]; /* transposed */
                ne[1] = t->ne[0];
            } else {
                ne[1] = ne[1] * 3 / 4;
            }
        }
        if (s->retype && strcmp(s->retype, t->name) == 0) {
            /* I32 has F32's size: the same bytes do */
            assert_int_equal(t->type, RVL_TYPE_F32);
            type = RVL_TYPE_I32;
        }
        rc = rvl_gguf_writer_add_tensor(w, t->name, type, t->n_dims, ne, t->data);
        assert_int_equal(rc, 0);
    }
    static const float ones[HD] = {[0 ... HD - 1] = 1.0f};
    if (s->extra_tensor)
        assert_int_equal(rvl_gguf_writer_add_tensor(w, s->extra_tensor, RVL_TYPE_F32, 1,
                                                    (uint64_t[2]){HD, 1}, ones), 0);
    rc = rvl_gguf_writer_finish(w);
    free(vb);
    return rc;
}

/* ======================================================================
 * The double-precision reference forward pass
 * ====================================================================== */

typedef struct {
    bool neox;               /* qwen2 rotation: pairs (i, i + rope_dim/2) */
    double rope_base;        /* 10000 */
    double pos_scale;        /* 1 / linear scaling factor */
    uint32_t rope_dim;       /* dims rotated per head (HD: all) */
    double eps;
    bool round_act;          /* round matmul inputs as the forward pass does */
    bool round_kv;           /* round k, v and q to f16 as the f16 cache path
                                does (its flash kernels keep the
                                probabilities in f32, as llama.cpp's
                                flash-attention path) */
} refcfg;

static refcfg ref_llama(void)
{
    return (refcfg){false, 10000.0, 1.0, HD, (double)1e-5f, false, false};
}

static refcfg ref_qwen2(void)
{
    return (refcfg){true, 10000.0, 1.0, HD, (double)1e-5f, false, false};
}

static void ref_rmsnorm(double *y, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

/* y (rows) = W (rows x cols, row-major: GGUF ne0 = cols) x. With
 * round_act, x is first rounded as the forward pass rounds it: stored in
 * the activation format W's dot product takes, and read back. */
static void ref_matvec(double *y, const ttensor *W, const double *x, bool round_act)
{
    enum { MAXN = FF > E ? FF : E };
    const int rows = (int)W->ne[1], cols = (int)W->ne[0];
    double xr[MAXN];
    assert_true(cols <= MAXN);
    if (round_act) {
        const rvl_kformat *af = rvl_kformat_get(rvl_kformat_get(W->type)->vec_dot_type);
        float xf[MAXN], back[MAXN];
        unsigned char q[4 * MAXN];
        for (int i = 0; i < cols; i++)
            xf[i] = (float)x[i];
        af->quantize(xf, q, cols, NULL);
        af->dequantize(q, back, cols);
        for (int i = 0; i < cols; i++)
            xr[i] = back[i];
        x = xr;
    }
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)W->deq[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

static void ref_rope(const refcfg *rc, double *v, int n_heads, int pos)
{
    const int half = (int)rc->rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        double *x = v + h * HD;
        for (int i = 0; i < half; i++) {
            double theta = pos * rc->pos_scale * pow(rc->rope_base, -2.0 * i / rc->rope_dim);
            int a = rc->neox ? i : 2 * i, b = rc->neox ? i + half : 2 * i + 1;
            double x0 = x[a], x1 = x[b];
            x[a] = x0 * cos(theta) - x1 * sin(theta);
            x[b] = x0 * sin(theta) + x1 * cos(theta);
        }
    }
}

/* Logits (n x V) of every position of toks[0..n). */
static void ref_forward(const tmodel *m, const refcfg *rc, const int32_t *toks, int n,
                        double *logits)
{
    static double kc[NL][MAXT][KVD], vc[NL][MAXT][KVD];
    double x[E], xb[E], q[QD], k[KVD], v[KVD], att[MAXT], ao[QD], o[E], g[FF], u[FF];

    const bool ra = rc->round_act;
    assert_true(n <= MAXT);
    const float *emb = tm_get(m, "token_embd.weight");
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < E; i++)
            x[i] = emb[(size_t)toks[t] * E + i];
        for (int l = 0; l < NL; l++) {
            ref_rmsnorm(xb, x, tm_get(m, "blk.%d.attn_norm.weight", l), E, rc->eps);
            ref_matvec(q, tm_tensor(m, "blk.%d.attn_q.weight", l), xb, ra);
            ref_matvec(k, tm_tensor(m, "blk.%d.attn_k.weight", l), xb, ra);
            ref_matvec(v, tm_tensor(m, "blk.%d.attn_v.weight", l), xb, ra);
            if (m->bias) {
                const float *bq = tm_get(m, "blk.%d.attn_q.bias", l);
                const float *bk = tm_get(m, "blk.%d.attn_k.bias", l);
                const float *bv = tm_get(m, "blk.%d.attn_v.bias", l);
                for (int i = 0; i < QD; i++)
                    q[i] += bq[i];
                for (int i = 0; i < KVD; i++) {
                    k[i] += bk[i];
                    v[i] += bv[i];
                }
            }
            ref_rope(rc, q, NH, t);
            ref_rope(rc, k, NKV, t);
            if (rc->round_kv) {
                for (int i = 0; i < KVD; i++) {
                    k[i] = rvl_f16_to_f32(rvl_f32_to_f16((float)k[i]));
                    v[i] = rvl_f16_to_f32(rvl_f32_to_f16((float)v[i]));
                }
                for (int i = 0; i < QD; i++)
                    q[i] = rvl_f16_to_f32(rvl_f32_to_f16((float)q[i]));
            }
            memcpy(kc[l][t], k, sizeof k);
            memcpy(vc[l][t], v, sizeof v);
            for (int h = 0; h < NH; h++) {
                const int kvh = h / (NH / NKV);
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < HD; i++)
                        d += q[h * HD + i] * kc[l][s][kvh * HD + i];
                    att[s] = d / sqrt((double)HD);
                    mx = fmax(mx, att[s]);
                }
                for (int s = 0; s <= t; s++)
                    sum += att[s] = exp(att[s] - mx);
                for (int i = 0; i < HD; i++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += att[s] / sum * vc[l][s][kvh * HD + i];
                    ao[h * HD + i] = acc;
                }
            }
            ref_matvec(o, tm_tensor(m, "blk.%d.attn_output.weight", l), ao, ra);
            for (int i = 0; i < E; i++)
                x[i] += o[i];
            ref_rmsnorm(xb, x, tm_get(m, "blk.%d.ffn_norm.weight", l), E, rc->eps);
            ref_matvec(g, tm_tensor(m, "blk.%d.ffn_gate.weight", l), xb, ra);
            ref_matvec(u, tm_tensor(m, "blk.%d.ffn_up.weight", l), xb, ra);
            for (int i = 0; i < FF; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_matvec(o, tm_tensor(m, "blk.%d.ffn_down.weight", l), g, ra);
            for (int i = 0; i < E; i++)
                x[i] += o[i];
        }
        ref_rmsnorm(xb, x, tm_get(m, "output_norm.weight"), E, rc->eps);
        const char *out = m->tied ? "token_embd.weight" : "output.weight";
        ref_matvec(logits + (size_t)t * V, tm_tensor(m, "%s", out), xb, ra);
    }
}

/* max |got - want| / max |want| */
static double rel_err(const float *got, const double *want, int n)
{
    double md = 0, mw = 0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs((double)got[i] - want[i]));
        mw = fmax(mw, fabs(want[i]));
    }
    return md / mw;
}

/* ======================================================================
 * Helpers
 * ====================================================================== */

static const int32_t seq[] = {1, 17, 256, 299, 42, 42, 100, 0, 255, 128, 7, 290};
#define NSEQ ((int)(sizeof seq / sizeof seq[0]))

/* Write a model and open it; the model must load. */
static rvl_model *open_model(const char *file, const tmodel *m, const spec *s)
{
    rvl_model *mod = NULL;
    assert_int_equal(write_model(tpath(file), m, s), 0);
    int rc = rvl_model_open(&mod, tpath(file));
    if (rc < 0)
        fail_msg("rvl_model_open(%s): %d %s", file, rc, rvl_errmsg());
    return mod;
}

/* The KV cache of the contexts the tests open: f32 against the exact
 * reference, f16 (the default) against the reference that rounds as the
 * f16 path does (refcfg.round_kv). */
static rvl_kv_type g_kv_type = RVL_KV_F32;

static rvl_ctx *open_ctx(const rvl_model *mod, uint32_t n_ctx, uint32_t n_threads)
{
    rvl_ctx *c = NULL;
    rvl_ctx_params cp = {.n_ctx = n_ctx, .n_threads = n_threads, .kv_type = g_kv_type};
    int rc = rvl_ctx_open(&c, mod, &cp);
    if (rc < 0)
        fail_msg("rvl_ctx_open: %d %s", rc, rvl_errmsg());
    return c;
}

/* Expect rvl_model_open of a model written with `s` to fail with `code`
 * (0: any error) and a message naming `want` and the file. */
static void expect_open_error(const char *file, const tmodel *m, const spec *s, int code,
                              const char *want)
{
    rvl_model *mod = (rvl_model *)1;
    assert_int_equal(write_model(tpath(file), m, s), 0);
    int rc = rvl_model_open(&mod, tpath(file));
    const char *msg = rc < 0 ? rvl_errmsg() : "(loaded)";
    if (rc >= 0)
        rvl_model_close(mod);
    if (rc >= 0 || (code && rc != code) || !strstr(msg, want) || !strstr(msg, tpath(file)))
        fail_msg("%s: expected error %d naming '%s' and the file, got %d '%s'", file, code,
                 want, rc, msg);
    assert_null(mod);
    unlink(tpath(file));
}

/* ======================================================================
 * (a) Hyper-parameters
 * ====================================================================== */

static void test_model_reads_llama_hyperparameters(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    tm_build(&m, RVL_TYPE_F32, false, false, 1);
    rvl_model *mod = open_model("hp-llama.gguf", &m, &s);
    const rvl_hparams *hp = rvl_model_hparams(mod);

    assert_string_equal(hp->arch, "llama");
    assert_int_equal(hp->n_layer, NL);
    assert_int_equal(hp->n_embd, E);
    assert_int_equal(hp->n_ff, FF);
    assert_int_equal(hp->n_head, NH);
    assert_int_equal(hp->n_head_kv, NKV);
    assert_int_equal(hp->head_dim, HD);
    assert_int_equal(hp->n_vocab, V);
    assert_int_equal(hp->n_ctx_train, NCTX_TRAIN);
    assert_true(hp->rms_eps == 1e-5f);
    assert_true(hp->rope_base == 10000.0f);
    assert_int_equal(hp->rope_dim, HD);
    assert_int_equal(hp->rope_type, RVL_ROPE_NORM);
    assert_int_equal(hp->rope_scaling, RVL_ROPE_SCALING_NONE);
    assert_true(hp->rope_factor == 1.0f);
    assert_false(hp->block.qkv_bias);
    assert_false(hp->tied_output);

    /* the tokenizer comes with the model */
    const rvl_tokenizer *tok = rvl_model_tokenizer(mod);
    assert_non_null(tok);
    assert_int_equal(rvl_tok_n_vocab(tok), V);
    assert_string_equal(rvl_tok_model(tok), "gpt2");
    int32_t ids[8];
    size_t n = 0;
    assert_int_equal(rvl_tok_encode(tok, "be", 2, false, false, ids, 8, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 256 + 1); /* "b e" is merge 1 */

    assert_non_null(rvl_model_file(mod));
    assert_non_null(rvl_file_find_tensor(rvl_model_file(mod), "output.weight"));
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_model_detects_tied_output_and_qwen2_flags(void **state)
{
    (void)state;
    tmodel m;
    spec s = {.arch = "qwen2"};
    tm_build(&m, RVL_TYPE_F32, true, true, 2);
    rvl_model *mod = open_model("hp-qwen2.gguf", &m, &s);
    const rvl_hparams *hp = rvl_model_hparams(mod);

    assert_string_equal(hp->arch, "qwen2");
    assert_true(hp->tied_output);
    assert_true(hp->block.qkv_bias);
    assert_int_equal(hp->rope_type, RVL_ROPE_NEOX);
    assert_int_equal(hp->n_vocab, V);
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_model_reads_optional_rope_keys(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 3);

    /* absent freq_base: 10000 */
    spec s = {.no_rope_base = true};
    rvl_model *mod = open_model("hp-rope0.gguf", &m, &s);
    assert_true(rvl_model_hparams(mod)->rope_base == 10000.0f);
    rvl_model_close(mod);

    spec s2 = {.rope_base = 500000.0f, .rope_dim = 8, .rope_scaling = "linear", .rope_factor = 4};
    mod = open_model("hp-rope1.gguf", &m, &s2);
    const rvl_hparams *hp = rvl_model_hparams(mod);
    assert_true(hp->rope_base == 500000.0f);
    assert_int_equal(hp->rope_dim, 8);
    assert_int_equal(hp->rope_scaling, RVL_ROPE_SCALING_LINEAR);
    assert_true(hp->rope_factor == 4.0f);
    rvl_model_close(mod);

    spec s3 = {.rope_scaling = "none"};
    mod = open_model("hp-rope2.gguf", &m, &s3);
    assert_int_equal(rvl_model_hparams(mod)->rope_scaling, RVL_ROPE_SCALING_NONE);
    rvl_model_close(mod);
    tm_free(&m);
}

/* ======================================================================
 * (b) Errors name the problem
 * ====================================================================== */

static void test_model_missing_key_is_named(void **state)
{
    (void)state;
    static const char *const keys[] = {
        "general.architecture",
        "llama.block_count",
        "llama.embedding_length",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.context_length",
        "llama.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
    };
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 4);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        spec s = {.omit = keys[i]};
        expect_open_error("nokey.gguf", &m, &s, 0, keys[i]);
    }
    tm_free(&m);
}

static void test_model_missing_tensor_is_named(void **state)
{
    (void)state;
    static const char *const names[] = {
        "token_embd.weight",       "output_norm.weight",      "blk.0.attn_norm.weight",
        "blk.1.attn_norm.weight",  "blk.0.attn_q.weight",     "blk.1.attn_k.weight",
        "blk.0.attn_v.weight",     "blk.1.attn_output.weight", "blk.0.ffn_norm.weight",
        "blk.1.ffn_gate.weight",   "blk.0.ffn_up.weight",     "blk.1.ffn_down.weight",
    };
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 5);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        spec s = {.omit = names[i]};
        expect_open_error("notensor.gguf", &m, &s, RVL_EFORMAT, names[i]);
    }
    tm_free(&m);

    /* qwen2 needs its biases */
    static const char *const biases[] = {"blk.0.attn_q.bias", "blk.1.attn_k.bias",
                                         "blk.1.attn_v.bias"};
    tm_build(&m, RVL_TYPE_F32, true, true, 6);
    for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) {
        spec s = {.arch = "qwen2", .omit = biases[i]};
        expect_open_error("nobias.gguf", &m, &s, RVL_EFORMAT, biases[i]);
    }
    tm_free(&m);
}

static void test_model_wrong_tensor_shape_is_named(void **state)
{
    (void)state;
    static const char *const names[] = {
        "token_embd.weight",       "output.weight",          "output_norm.weight",
        "blk.0.attn_norm.weight",  "blk.0.attn_q.weight",    "blk.1.attn_k.weight",
        "blk.0.attn_v.weight",     "blk.1.attn_output.weight", "blk.1.ffn_norm.weight",
        "blk.0.ffn_gate.weight",   "blk.1.ffn_up.weight",    "blk.0.ffn_down.weight",
    };
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 7);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        spec s = {.reshape = names[i]};
        expect_open_error("shape.gguf", &m, &s, RVL_EFORMAT, names[i]);
    }
    tm_free(&m);

    tm_build(&m, RVL_TYPE_F32, true, true, 8);
    spec s = {.arch = "qwen2", .reshape = "blk.1.attn_v.bias"};
    expect_open_error("shape-bias.gguf", &m, &s, RVL_EFORMAT, "blk.1.attn_v.bias");
    tm_free(&m);
}

static void test_model_vocab_size_contradicting_embedding_is_refused(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 9);
    spec s = {.vocab_size = V + 1};
    expect_open_error("vocab.gguf", &m, &s, RVL_EFORMAT, "vocab_size");
    s.vocab_size = V; /* agreeing: fine */
    rvl_model *mod = open_model("vocab-ok.gguf", &m, &s);
    assert_int_equal(rvl_model_hparams(mod)->n_vocab, V);
    rvl_model_close(mod);
    tm_free(&m);
}

/* A vocabulary larger than the embedding would tokenize text into ids
 * the model cannot run (rvl_decode fails mid-chat): refuse it at load
 * time, naming both. Fewer tokens than rows too (below): as llama.cpp,
 * which sizes the embedding by the token list (its converter pads the
 * list of padded vocabularies such as Qwen's). */
static void test_model_tokenizer_larger_than_embedding_is_refused(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 15);
    spec s = {.extra_tokens = 4};
    expect_open_error("vocab-big.gguf", &m, &s, RVL_EFORMAT, "token_embd.weight");
    tm_free(&m);
    assert_non_null(strstr(rvl_errmsg(), "tokenizer.ggml.tokens"));
}

/* Rows without a token would be sampled and then fail to print ("token
 * id 198 is out of range" after the model had loaded). */
static void test_model_tokenizer_smaller_than_embedding_is_refused(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 15);
    spec s = {.fewer_tokens = 60};
    expect_open_error("vocab-small.gguf", &m, &s, RVL_EFORMAT, "token_embd.weight");
    tm_free(&m);
    assert_non_null(strstr(rvl_errmsg(), "tokenizer.ggml.tokens has 240 tokens"));
}

/* A value that overflowed to infinity (a config.json's 1e400) or NaN is
 * refused naming the key, never run with. */
static void test_model_non_finite_hyperparameters_are_refused(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 15);
    spec s = {.rope_base = INFINITY};
    expect_open_error("inf-base.gguf", &m, &s, RVL_EFORMAT, "llama.rope.freq_base");
    spec s2 = {.rope_scaling = "linear", .rope_factor_raw = NAN};
    expect_open_error("nan-factor.gguf", &m, &s2, RVL_EFORMAT, "llama.rope.scaling.factor");
    spec s3 = {.rope_scaling = "linear", .rope_factor_raw = -2.0f};
    expect_open_error("neg-factor.gguf", &m, &s3, RVL_EFORMAT, "llama.rope.scaling.factor");
    tm_free(&m);
}

static void test_model_unsupported_architecture_is_named(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 10);
    spec s = {.arch = "gpt2"};
    expect_open_error("arch.gguf", &m, &s, RVL_EUNSUPPORTED, "gpt2");
    spec s2 = {.arch = "mamba"};
    expect_open_error("arch2.gguf", &m, &s2, RVL_EUNSUPPORTED, "mamba");
    tm_free(&m);
}

/* A feature a file asks for is refused, naming the key or tensor that
 * asked for it: RVL_EUNSUPPORTED when nothing implements it, RVL_EFORMAT
 * when its architecture does not have it (llama.cpp would ignore it); a
 * key at its neutral value asks for nothing. */
static void test_model_unimplemented_block_feature_is_refused_naming_the_key(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 10);
    static const struct { const char *key; float v; int err; } f32s[] = {
        {"attn_logit_softcapping", 50, RVL_EFORMAT}, {"final_logit_softcapping", 30, RVL_EFORMAT},
        {"embedding_scale", 12, RVL_EFORMAT}, {"attention.scale", 0.125f, RVL_EFORMAT},
        {"rope.freq_base_swa", 10000, RVL_EFORMAT},
        {"logit_scale", 2, RVL_EUNSUPPORTED}, {"residual_scale", 0.5f, RVL_EUNSUPPORTED},
    };
    char want[96];
    for (size_t i = 0; i < sizeof f32s / sizeof f32s[0]; i++) {
        spec s = {.f32_key = f32s[i].key, .f32_val = f32s[i].v};
        snprintf(want, sizeof want, "'llama.%s'", f32s[i].key);
        expect_open_error("feature.gguf", &m, &s, f32s[i].err, want);
    }
    spec sw = {.arch = "qwen2", .u32_key = "attention.sliding_window", .u32_val = 4};
    tmodel mb;
    tm_build(&mb, RVL_TYPE_F32, true, false, 10);
    expect_open_error("swa.gguf", &mb, &sw, RVL_EFORMAT, "'qwen2.attention.sliding_window'");
    tm_free(&mb);
    static const char *const tensors[] = {"blk.0.post_ffw_norm.weight",
                                          "blk.0.post_attention_norm.weight"};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        spec s = {.extra_tensor = tensors[i]};
        snprintf(want, sizeof want, "tensor '%s'", tensors[i]);
        expect_open_error("feature-t.gguf", &m, &s, RVL_EFORMAT, want);
    }
    spec sp = {.arch = "qwen2", .u32_key = "attention.sliding_window_pattern", .u32_val = 6};
    tm_build(&mb, RVL_TYPE_F32, true, false, 10);
    expect_open_error("swp.gguf", &mb, &sp, RVL_EFORMAT,
                      "'qwen2.attention.sliding_window_pattern' asks for the block feature "
                      "'swa_period'");
    tm_free(&mb);
    /* experts claimed by the metadata but absent from the tensors */
    spec ec = {.u32_key = "expert_count", .u32_val = 4};
    expect_open_error("experts.gguf", &m, &ec, RVL_EFORMAT,
                      "llama.expert_count is 4 but the file has no experts");
    /* an output bias (gpt-oss's) in a llama file: a feature llama lacks */
    spec ob = {.extra_tensor = "blk.0.attn_output.bias"};
    expect_open_error("feature-ob.gguf", &m, &ob, RVL_EFORMAT,
                      "tensor 'blk.0.attn_output.bias' asks for the block feature "
                      "'attn_out_bias', which architecture 'llama' does not have");
    /* a tensor no step uses is refused, not ignored */
    spec xt = {.extra_tensor = "blk.0.attn_extra.weight"};
    expect_open_error("feature-xt.gguf", &m, &xt, RVL_EUNSUPPORTED,
                      "tensor 'blk.0.attn_extra.weight' is not used by architecture 'llama'");
    /* Gemma's post-norms are its own: required */
    spec g2 = {.arch = "gemma2"};
    expect_open_error("gemma2-nopost.gguf", &m, &g2, RVL_EFORMAT,
                      "missing tensor 'blk.0.post_attention_norm.weight'");
    /* implemented (qwen3's), but not llama's: the file does not fit its architecture */
    spec qn = {.extra_tensor = "blk.0.attn_q_norm.weight"};
    expect_open_error("feature-qn.gguf", &m, &qn, RVL_EFORMAT,
                      "tensor 'blk.0.attn_q_norm.weight' asks for the block feature 'qk_norm', "
                      "which architecture 'llama' does not have");

    /* a family's own feature is required: qwen3 without its QK-norm gains */
    spec q3 = {.arch = "qwen3"};
    expect_open_error("qwen3-nonorm.gguf", &m, &q3, RVL_EFORMAT,
                      "missing tensor 'blk.0.attn_q_norm.weight'");

    /* neutral: a window as long as the training context, a scale of 1 */
    spec n1 = {.u32_key = "attention.sliding_window", .u32_val = NCTX_TRAIN};
    rvl_model *mod = open_model("neutral.gguf", &m, &n1);
    assert_int_equal(rvl_model_hparams(mod)->block.swa_window, 0);
    rvl_model_close(mod);
    spec n2 = {.f32_key = "embedding_scale", .f32_val = 1};
    mod = open_model("neutral2.gguf", &m, &n2);
    assert_true(rvl_model_hparams(mod)->block.embd_scale == 0);
    rvl_model_close(mod);
    tm_free(&m);
}

/* The recipe's helpers: a backend's missing feature by name, layer kinds. */
static void test_family_recipe_features_and_layer_kinds(void **state)
{
    (void)state;
    const rvl_block llama = {.norm_pre_attn = true, .norm_pre_ffn = true};
    rvl_block b = llama;
    assert_null(rvl_family_missing(&b, &llama));
    b.qk_norm = true;
    assert_string_equal(rvl_family_missing(&b, &llama), "qk_norm");
    b = llama;
    b.act = RVL_ACT_GELU_TANH;
    assert_string_equal(rvl_family_missing(&b, &llama), "act gelu_tanh");
    b = llama;
    b.final_softcap = 30;
    assert_string_equal(rvl_family_missing(&b, &llama), "final_softcap");
    b = llama;
    b.norm_pre_ffn = false;
    assert_string_equal(rvl_family_missing(&b, &llama), "no norm_pre_ffn");

    /* Gemma 3's pattern: five windowed layers, then a global one */
    b = (rvl_block){.swa_window = 512, .swa_period = 6};
    for (uint32_t l = 0; l < 12; l++)
        assert_int_equal(rvl_family_layer_kind(&b, l),
                         l == 5 || l == 11 ? RVL_LAYER_GLOBAL : RVL_LAYER_WINDOW);
    b.swa_period = 0;
    assert_int_equal(rvl_family_layer_kind(&b, 5), RVL_LAYER_WINDOW);
    b.swa_window = 0;
    assert_int_equal(rvl_family_layer_kind(&b, 0), RVL_LAYER_GLOBAL);
}

static void test_model_head_count_kv_must_divide_head_count(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 11);
    spec s = {.n_head_kv = 3};
    expect_open_error("gqa.gguf", &m, &s, RVL_EFORMAT, "head_count_kv");
    spec s2 = {.n_head_kv = 8}; /* more KV heads than query heads */
    expect_open_error("gqa2.gguf", &m, &s2, RVL_EFORMAT, "head_count_kv");
    tm_free(&m);
}

static void test_model_yarn_keys_are_read_and_unknown_scaling_is_named(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 12);
    spec s = {.rope_scaling = "yarn", .rope_factor = 4, .yarn_orig_ctx = 32};
    rvl_model *mod = open_model("yarn.gguf", &m, &s);
    const rvl_hparams *hp = rvl_model_hparams(mod);
    assert_int_equal(hp->rope_scaling, RVL_ROPE_SCALING_YARN);
    assert_true(hp->rope_factor == 4.0f);
    assert_int_equal(hp->rope_orig_ctx, 32);
    assert_true(hp->yarn_beta_fast == 32.0f && hp->yarn_beta_slow == 1.0f);
    assert_true(hp->yarn_ext_factor == 1.0f && hp->rope_attn_factor == 1.0f);
    rvl_model_close(mod);

    spec s2 = {.rope_scaling = "longrope", .rope_factor = 4};
    expect_open_error("longrope.gguf", &m, &s2, RVL_EUNSUPPORTED, "longrope");
    spec s3 = {.rope_scaling = "yarn", .rope_factor = -2};
    expect_open_error("yarn-neg.gguf", &m, &s3, RVL_EFORMAT, "rope.scaling.factor");
    spec s4 = {.rope_scaling = "yarn"};
    expect_open_error("yarn-nofactor.gguf", &m, &s4, RVL_EFORMAT, "rope.scaling.factor");
    tm_free(&m);
}

/* The YaRN tables against the definition, in double: transformers'
 * _compute_yarn_parameters (inv_freq mixed per pair by a linear ramp
 * between the correction dims, cos/sin times mscale = 0.1 ln(s) + 1). */
static void test_rope_yarn_tables_match_definition(void **state)
{
    (void)state;
    rvl_hparams hp = {0};
    hp.rope_dim = 64;
    hp.head_dim = 64;
    hp.rope_base = 10000.0f;
    hp.rope_scaling = RVL_ROPE_SCALING_YARN;
    hp.rope_factor = 8.0f;
    hp.rope_orig_ctx = 256;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    hp.yarn_ext_factor = 1.0f;
    hp.rope_attn_factor = 1.0f;
    enum { N = 3000, H = 32 };
    float *cs = malloc(sizeof(float) * N * H), *sn = malloc(sizeof(float) * N * H);
    float mul = 0;
    rvl_rope_tables(&hp, NULL, N, cs, sn, &mul);

    double d = 64, base = 10000, factor = 8, orig = 256;
    double lo = floor(d * log(orig / (32 * 2 * M_PI)) / (2 * log(base)));
    double hi = ceil(d * log(orig / (1 * 2 * M_PI)) / (2 * log(base)));
    lo = lo < 0 ? 0 : lo;
    hi = hi > d - 1 ? d - 1 : hi;
    double mscale = 0.1 * log(factor) + 1;
    assert_true(fabs(mul - mscale * mscale) < 1e-6);
    double maxerr = 0;
    for (int i = 0; i < H; i++) {
        double f = pow(base, -2.0 * i / d);
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double extrap = 1 - ramp; /* weight of the unscaled frequency */
        double inv = f / factor * (1 - extrap) + f * extrap;
        for (int p = 0; p < N; p += 7) {
            double e = fabs(cos(p * inv) - cs[p * H + i]) + fabs(sin(p * inv) - sn[p * H + i]);
            if (e > maxerr)
                maxerr = e;
        }
    }
    print_message("yarn tables vs double: %.3g\n", maxerr);
    /* float angles of up to ~3000 rad: a few ulp of 3000 is ~1e-3 */
    assert_true(maxerr < 2e-3);
    /* pairs below the ramp are interpolated (1/8 of the frequency), above it kept */
    assert_true(fabs(cs[100 * H + 0] - cos(100.0)) < 1e-5);
    assert_true(fabs(cs[100 * H + (H - 1)] - cos(100.0 * pow(base, -2.0 * (H - 1) / d) / 8)) < 1e-5);

    /* Llama 3.1: each pair's angle divided by its rope_freqs entry */
    rvl_hparams h3 = hp;
    h3.rope_scaling = RVL_ROPE_SCALING_NONE;
    float div[H];
    for (int i = 0; i < H; i++)
        div[i] = i < 8 ? 1.0f : i < 16 ? 1.0f + (float)(i - 8) : 8.0f;
    rvl_rope_tables(&h3, div, N, cs, sn, &mul);
    assert_true(mul == 1.0f);
    maxerr = 0;
    for (int i = 0; i < H; i++)
        for (int p = 0; p < N; p += 11) {
            double a = p * pow(base, -2.0 * i / d) / div[i];
            double e = fabs(cos(a) - cs[p * H + i]) + fabs(sin(a) - sn[p * H + i]);
            if (e > maxerr)
                maxerr = e;
        }
    print_message("llama3 tables vs double: %.3g\n", maxerr);
    assert_true(maxerr < 2e-3);

    /* NTK-aware: the same table as plain RoPE with base * factor^(d/(d-2)) */
    rvl_hparams hn = hp;
    hn.rope_scaling = RVL_ROPE_SCALING_NTK;
    hn.rope_factor = 4.0f;
    float *cs2 = malloc(sizeof(float) * N * H), *sn2 = malloc(sizeof(float) * N * H);
    rvl_rope_tables(&hn, NULL, N, cs, sn, &mul);
    assert_true(mul == 1.0f);
    rvl_hparams hb = hp;
    hb.rope_scaling = RVL_ROPE_SCALING_NONE;
    hb.rope_base = (float)(10000.0 * pow(4.0, 64.0 / 62.0));
    rvl_rope_tables(&hb, NULL, N, cs2, sn2, &mul);
    assert_memory_equal(cs, cs2, sizeof(float) * N * H);
    assert_memory_equal(sn, sn2, sizeof(float) * N * H);
    /* the highest frequency is untouched, the lowest stretched by about the factor */
    assert_true(fabs(cs[100 * H] - cos(100.0)) < 1e-5);
    double f_low = pow(10000.0, -2.0 * (H - 1) / 64.0);
    double f_ntk = pow(hb.rope_base, -2.0 * (H - 1) / 64.0);
    assert_true(f_low / f_ntk > 3.9 && f_low / f_ntk < 4.1);
    free(cs2);
    free(sn2);
    free(cs);
    free(sn);
}

static void test_model_unusable_tensor_type_is_named(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 13);
    spec s = {.retype = "blk.0.attn_q.weight"};
    expect_open_error("type.gguf", &m, &s, RVL_EUNSUPPORTED, "blk.0.attn_q.weight");
    assert_non_null(strstr(rvl_errmsg(), "I32"));
    spec s2 = {.retype = "blk.1.ffn_norm.weight"};
    expect_open_error("type2.gguf", &m, &s2, RVL_EUNSUPPORTED, "blk.1.ffn_norm.weight");
    spec s3 = {.retype = "token_embd.weight"};
    expect_open_error("type3.gguf", &m, &s3, RVL_EUNSUPPORTED, "token_embd.weight");
    tm_free(&m);
}

static void test_model_truncated_or_corrupt_file_is_refused(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    tm_build(&m, RVL_TYPE_Q8_0, false, false, 14);
    assert_int_equal(write_model(tpath("whole.gguf"), &m, &s), 0);
    tm_free(&m);

    FILE *f = fopen(tpath("whole.gguf"), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);

    /* cuts in the header, the metadata, the tensor infos and the data */
    const char *p = tpath("cut.gguf");
    char path[8192];
    snprintf(path, sizeof path, "%s", p);
    for (long cut = 0; cut < size; cut += cut < 64 ? 1 : 1 + size / 97) {
        f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, (size_t)cut, f), (size_t)cut);
        fclose(f);
        rvl_model *mod = (rvl_model *)1;
        int rc = rvl_model_open(&mod, path);
        if (rc >= 0)
            fail_msg("a file cut at byte %ld of %ld loaded", cut, size);
        assert_null(mod);
        assert_non_null(strstr(rvl_errmsg(), path));
    }

    /* bad magic */
    buf[1] ^= 0x20;
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    rvl_model *mod = NULL;
    assert_true(rvl_model_open(&mod, path) < 0);
    assert_non_null(strstr(rvl_errmsg(), path));

    /* no such file */
    assert_true(rvl_model_open(&mod, tpath("absent.gguf")) < 0);
    assert_non_null(strstr(rvl_errmsg(), "absent.gguf"));
    assert_null(mod);
    unlink(path);
    unlink(tpath("whole.gguf"));
    free(buf);
}

/* ======================================================================
 * (c) The forward pass against the double-precision reference
 * ====================================================================== */

/* Decode seq[0..n) token by token and, for every prefix, in one batch;
 * return the worst relative error over all steps. */
static double forward_error(const rvl_model *mod, const tmodel *m, const refcfg *rc, int n)
{
    double *ref = malloc((size_t)n * V * sizeof *ref);
    const float *lg = NULL;
    double worst = 0;

    assert_non_null(ref);
    ref_forward(m, rc, seq, n, ref);

    /* token by token: every step's logits */
    rvl_ctx *c = open_ctx(mod, 0, 1);
    for (int t = 0; t < n; t++) {
        assert_int_equal(rvl_decode(c, &seq[t], 1, &lg), 0);
        assert_int_equal(rvl_ctx_pos(c), t + 1);
        worst = fmax(worst, rel_err(lg, ref + (size_t)t * V, V));
    }
    /* one batch per prefix: the last token's logits */
    for (int t = 0; t < n; t++) {
        rvl_ctx_reset(c);
        assert_int_equal(rvl_decode(c, seq, (uint32_t)t + 1, &lg), 0);
        assert_int_equal(rvl_ctx_pos(c), t + 1);
        worst = fmax(worst, rel_err(lg, ref + (size_t)t * V, V));
    }
    /* batches after a cached prefix: 4, then 1, then the rest */
    rvl_ctx_reset(c);
    assert_int_equal(rvl_decode(c, seq, 4, &lg), 0);
    worst = fmax(worst, rel_err(lg, ref + 3 * V, V));
    assert_int_equal(rvl_decode(c, seq + 4, 1, &lg), 0);
    worst = fmax(worst, rel_err(lg, ref + 4 * V, V));
    assert_int_equal(rvl_decode(c, seq + 5, (uint32_t)n - 5, &lg), 0);
    worst = fmax(worst, rel_err(lg, ref + (size_t)(n - 1) * V, V));
    rvl_ctx_close(c);
    free(ref);
    return worst;
}

static void test_forward_llama_f32_matches_reference(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    refcfg rc = ref_llama();
    tm_build(&m, RVL_TYPE_F32, false, false, 100);
    rvl_model *mod = open_model("fw-llama.gguf", &m, &s);
    double err = forward_error(mod, &m, &rc, NSEQ);
    print_message("llama F32: max error %.3g of max |logit|\n", err);
    assert_true(err < 1e-4);
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_forward_llama_tied_f32_matches_reference(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    refcfg rc = ref_llama();
    tm_build(&m, RVL_TYPE_F32, false, true, 101);
    rvl_model *mod = open_model("fw-llama-tied.gguf", &m, &s);
    assert_true(rvl_model_hparams(mod)->tied_output);
    double err = forward_error(mod, &m, &rc, NSEQ);
    print_message("llama tied F32: max error %.3g of max |logit|\n", err);
    assert_true(err < 1e-4);
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_forward_qwen2_f32_matches_reference(void **state)
{
    (void)state;
    tmodel m;
    spec s = {.arch = "qwen2"};
    refcfg rc = ref_qwen2();
    tm_build(&m, RVL_TYPE_F32, true, true, 102);
    rvl_model *mod = open_model("fw-qwen2.gguf", &m, &s);
    double err = forward_error(mod, &m, &rc, NSEQ);
    print_message("qwen2 F32: max error %.3g of max |logit|\n", err);
    assert_true(err < 1e-4);
    rvl_model_close(mod);
    tm_free(&m);
}

/* llama.cpp applies attn_{q,k,v}.bias to a "llama" model when the file
 * has them. Computing without them would be silently wrong: the loader
 * must either use them or refuse the file naming the tensor. */
static void test_forward_llama_with_qkv_biases_uses_or_refuses_them(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    refcfg rc = ref_llama();
    rvl_model *mod = NULL;
    tm_build(&m, RVL_TYPE_F32, true, false, 105);
    assert_int_equal(write_model(tpath("fw-llama-bias.gguf"), &m, &s), 0);
    int r = rvl_model_open(&mod, tpath("fw-llama-bias.gguf"));
    if (r < 0) {
        assert_non_null(strstr(rvl_errmsg(), "attn_q.bias"));
    } else {
        double err = forward_error(mod, &m, &rc, NSEQ);
        print_message("llama F32 with biases: max error %.3g of max |logit|\n", err);
        rvl_model_close(mod);
        if (!(err < 1e-4)) {
            tm_free(&m);
            fail_msg("llama with attn_{q,k,v}.bias: the forward pass ignores the biases "
                     "(error %.3g)", err);
        }
    }
    unlink(tpath("fw-llama-bias.gguf"));

    /* biases in some layers only: not a model anyone can run right */
    spec s2 = {.omit = "blk.1.attn_k.bias"};
    expect_open_error("llama-bias-partial.gguf", &m, &s2, RVL_EFORMAT, "blk.1.attn_k.bias");
    spec s3 = {.omit = "blk.0.attn_q.bias"};
    expect_open_error("llama-bias-partial2.gguf", &m, &s3, RVL_EFORMAT, "blk.0.attn_q.bias");
    tm_free(&m);
}

/* The reference really tells the layouts apart: the wrong rotation is far
 * off, so the 1e-4 agreement above is not an accident of tiny angles. */
static void test_forward_rope_layout_matters(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    refcfg wrong = ref_llama();
    wrong.neox = true;
    tm_build(&m, RVL_TYPE_F32, false, false, 100);
    rvl_model *mod = open_model("fw-layout.gguf", &m, &s);
    double err = forward_error(mod, &m, &wrong, NSEQ);
    print_message("llama vs a NeoX reference: %.3g\n", err);
    assert_true(err > 1e-2);
    rvl_model_close(mod);
    tm_free(&m);
}

/* The default f16 cache against the reference that rounds k, v, q and the
 * attention probabilities to f16 where the forward pass does (llama.cpp's
 * CPU attention): agreement as tight as the f32 path's shows the rounding
 * is exactly where the comment in forward.c says; the exact reference is
 * further away by the f16 rounding itself. */
static void test_forward_f16_cache_rounds_like_llamacpp(void **state)
{
    (void)state;
    tmodel m;
    tm_build(&m, RVL_TYPE_F32, false, false, 105);
    spec s = {0};
    rvl_model *mod = open_model("fw-kvf16.gguf", &m, &s);
    refcfg rc = ref_llama();
    g_kv_type = RVL_KV_F16;
    double exact = forward_error(mod, &m, &rc, NSEQ);
    rc.round_kv = true;
    double emul = forward_error(mod, &m, &rc, NSEQ);
    g_kv_type = RVL_KV_F32;
    print_message("f16 cache: vs exact %.3g, vs f16-rounding reference %.3g\n", exact, emul);
    assert_true(emul < 1e-4);
    assert_true(exact > 2 * emul);
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_forward_partial_rope_and_linear_scaling_match_reference(void **state)
{
    (void)state;
    tmodel m;
    spec s = {.rope_base = 500.0f, .rope_dim = 8, .rope_scaling = "linear", .rope_factor = 2};
    refcfg rc = ref_llama();
    rc.rope_base = 500.0;
    rc.rope_dim = 8;
    rc.pos_scale = 0.5;
    tm_build(&m, RVL_TYPE_F32, false, false, 103);
    rvl_model *mod = open_model("fw-rope-llama.gguf", &m, &s);
    double err = forward_error(mod, &m, &rc, NSEQ);
    print_message("llama partial/linear RoPE: %.3g\n", err);
    assert_true(err < 1e-4);
    rvl_model_close(mod);
    tm_free(&m);

    spec s2 = {.arch = "qwen2", .rope_dim = 8};
    refcfg rc2 = ref_qwen2();
    rc2.rope_dim = 8;
    tm_build(&m, RVL_TYPE_F32, true, false, 104);
    mod = open_model("fw-rope-qwen2.gguf", &m, &s2);
    err = forward_error(mod, &m, &rc2, NSEQ);
    print_message("qwen2 partial RoPE: %.3g\n", err);
    assert_true(err < 1e-4);
    rvl_model_close(mod);
    tm_free(&m);
}

/* Quantized weights. The reference runs on the dequantized weights with
 * exact activations; the forward pass rounds each matmul's input to the
 * weight format's activation type first (F16 for F16 weights, Q8_0 for
 * Q8_0/Q4_0, Q8_1 for Q4_1, as llama.cpp does), and Q8_1 also stores
 * each block's d*sum(q) as f16.
 *
 * Size of that rounding: a Q8 block step is amax/127, so an input is off
 * by amax/(127*sqrt(12)) rms, about 0.6% of its rms for 32 Gaussian-ish
 * values; each matmul output inherits about that, and ~15 matmuls in a
 * row (7 per layer, 2 layers, the output) plus attention's sensitivity
 * to q and k bring it to a few % of max |logit|. Measured with this
 * model and these seeds (max over all steps): F16 1.2e-3; Q8_0 2.9e-2,
 * Q4_0 3.1e-2, Q4_1 2.2e-2 (llama); Q8_0 3.1e-2, Q4_1 2.3e-2 (qwen2). The
 * bounds are 2-2.5x that. Real bugs are far above them: a reference
 * without the qwen2 biases is off by 1.0, one that drops Q4_1's block
 * minimum by 1.1 (measured by mutating this file).
 *
 * The "emulated" number printed runs the reference on activations
 * rounded the same way: it is ~1e-7 for Q8_0 and Q4_0, showing the
 * difference above is all activation rounding. It is not asserted: where
 * float and double inputs straddle a rounding boundary one element
 * rounds the other way (one f16 step, or a whole Q8 step), which the
 * model amplifies to 1e-4..1e-2; another summation order (SIMD kernels)
 * moves those boundaries. */
static void check_quantized(uint32_t type, const char *arch, double bound)
{
    tmodel m;
    bool qwen = strcmp(arch, "qwen2") == 0;
    spec s = {.arch = arch};
    refcfg rc = qwen ? ref_qwen2() : ref_llama();
    char file[64];
    snprintf(file, sizeof file, "fw-%s-%u.gguf", arch, type);
    tm_build(&m, type, qwen, qwen, 200 + type);
    rvl_model *mod = open_model(file, &m, &s);
    double err = forward_error(mod, &m, &rc, NSEQ);
    rc.round_act = true;
    double emulated = forward_error(mod, &m, &rc, NSEQ);
    print_message("%s %s: max error %.3g of max |logit| (bound %.3g); emulated %.3g\n", arch,
                  rvl_type_get(type)->name, err, bound, emulated);
    if (!(err < bound))
        fail_msg("%s %s: error %.3g exceeds %.3g", arch, rvl_type_get(type)->name, err, bound);
    rvl_model_close(mod);
    tm_free(&m);
    unlink(tpath(file));
}

/* Matrices of different formats in one layer: the forward pass must
 * quantize each matmul's input for that matrix's activation format (it
 * reuses one quantized input across Q/K/V and gate/up only when their
 * formats agree). Every branch of that reuse is taken here. */
static void test_forward_mixed_weight_types_match_reference(void **state)
{
    (void)state;
    static const type_rule rules[] = {
        {"token_embd", RVL_TYPE_Q4_1},      {"output.weight", RVL_TYPE_Q8_0},
        {"attn_q.weight", RVL_TYPE_Q4_1},   {"attn_k.weight", RVL_TYPE_Q8_0},
        {"attn_v.weight", RVL_TYPE_Q4_1},   {"attn_output.weight", RVL_TYPE_F16},
        {"ffn_gate.weight", RVL_TYPE_Q4_0}, {"ffn_up.weight", RVL_TYPE_Q4_0},
        {"ffn_down.weight", RVL_TYPE_Q4_1}, {NULL, 0},
    };
    static const type_rule rules2[] = {
        {"attn_q.weight", RVL_TYPE_Q8_0},   {"attn_k.weight", RVL_TYPE_Q8_0},
        {"attn_v.weight", RVL_TYPE_F16},    {"ffn_gate.weight", RVL_TYPE_F16},
        {"ffn_up.weight", RVL_TYPE_Q4_1},   {"ffn_down.weight", RVL_TYPE_F32},
        {NULL, 0},
    };
    const type_rule *sets[] = {rules, rules2};
    for (int i = 0; i < 2; i++) {
        tmodel m;
        spec s = {.arch = i ? "qwen2" : "llama"};
        refcfg rc = i ? ref_qwen2() : ref_llama();
        mixed = sets[i];
        tm_build(&m, RVL_TYPE_F32, i == 1, false, 500 + (uint64_t)i);
        mixed = NULL;
        rvl_model *mod = open_model("fw-mixed.gguf", &m, &s);
        double err = forward_error(mod, &m, &rc, NSEQ);
        print_message("%s mixed types: max error %.3g of max |logit|\n", s.arch, err);
        rvl_model_close(mod);
        tm_free(&m);
        assert_true(err < 6e-2);
    }
}

static void test_forward_quantized_weights_match_reference(void **state)
{
    (void)state;
    check_quantized(RVL_TYPE_F16, "llama", 3e-3);
    check_quantized(RVL_TYPE_Q8_0, "llama", 6e-2);
    check_quantized(RVL_TYPE_Q4_0, "llama", 6e-2);
    check_quantized(RVL_TYPE_Q4_1, "llama", 6e-2);
    check_quantized(RVL_TYPE_Q8_0, "qwen2", 6e-2);
    check_quantized(RVL_TYPE_Q4_1, "qwen2", 6e-2);
}

/* ======================================================================
 * (d) rvl_decode's contract
 * ====================================================================== */

static void test_decode_context_overflow_leaves_state_usable(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    refcfg rc = ref_llama();
    double ref[NSEQ * V];
    const float *lg = NULL;
    tm_build(&m, RVL_TYPE_F32, false, false, 300);
    rvl_model *mod = open_model("ctx.gguf", &m, &s);
    ref_forward(&m, &rc, seq, NSEQ, ref);

    rvl_ctx *c = open_ctx(mod, 12, 1);
    assert_int_equal(rvl_ctx_n_ctx(c), 12);
    assert_int_equal(rvl_decode(c, seq, 10, &lg), 0);
    lg = NULL;
    assert_int_equal(rvl_decode(c, seq + 10, 3, &lg), RVL_ERANGE);
    assert_non_null(strstr(rvl_errmsg(), "context"));
    assert_int_equal(rvl_ctx_pos(c), 10);
    /* what fits still runs, and continues the same sequence */
    assert_int_equal(rvl_decode(c, seq + 10, 2, &lg), 0);
    assert_int_equal(rvl_ctx_pos(c), 12);
    assert_true(rel_err(lg, ref + 11 * V, V) < 1e-4);
    assert_int_equal(rvl_decode(c, seq, 1, &lg), RVL_ERANGE);
    assert_int_equal(rvl_ctx_pos(c), 12);
    rvl_ctx_close(c);

    /* the default context is min(4096, context_length); NULL: defaults */
    c = open_ctx(mod, 0, 1);
    assert_int_equal(rvl_ctx_n_ctx(c), NCTX_TRAIN);
    rvl_ctx_close(c);
    c = NULL;
    assert_int_equal(rvl_ctx_open(&c, mod, NULL), 0);
    assert_int_equal(rvl_ctx_n_ctx(c), NCTX_TRAIN);
    assert_int_equal(rvl_ctx_pos(c), 0);
    assert_int_equal(rvl_decode(c, seq, 3, &lg), 0);
    /* NULL params: the default f16 cache, off the exact reference by its rounding */
    assert_true(rel_err(lg, ref + 2 * V, V) < 2e-3);
    rvl_ctx_close(c);
    c = (rvl_ctx *)1;
    rvl_ctx_params bad = {.n_ctx = 16, .kv_type = (rvl_kv_type)7};
    assert_int_equal(rvl_ctx_open(&c, mod, &bad), RVL_EINVAL);
    assert_null(c);
    assert_non_null(strstr(rvl_errmsg(), "KV cache type"));
    rvl_ctx_params badr = {.n_ctx = 16, .rope_scaling = "longrope"};
    c = (rvl_ctx *)1;
    assert_int_equal(rvl_ctx_open(&c, mod, &badr), RVL_EINVAL);
    assert_null(c);
    assert_non_null(strstr(rvl_errmsg(), "RoPE"));
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_decode_rejects_invalid_tokens(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    const float *lg = NULL;
    tm_build(&m, RVL_TYPE_F32, false, false, 301);
    rvl_model *mod = open_model("tokens.gguf", &m, &s);
    rvl_ctx *c = open_ctx(mod, 16, 1);

    const int32_t bad[][3] = {
        {-1, 0, 0}, {V, 0, 0}, {5, 6, V}, {5, INT32_MIN, 6}, {INT32_MAX, 1, 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rvl_decode(c, bad[i], 3, &lg), RVL_EINVAL);
        assert_int_equal(rvl_ctx_pos(c), 0); /* nothing was run */
    }
    assert_int_equal(rvl_decode(c, seq, 0, &lg), RVL_EINVAL);
    /* the first and last ids are valid */
    const int32_t edge[2] = {0, V - 1};
    assert_int_equal(rvl_decode(c, edge, 2, &lg), 0);
    assert_int_equal(rvl_ctx_pos(c), 2);
    rvl_ctx_close(c);
    rvl_model_close(mod);
    tm_free(&m);
}

static void test_decode_after_reset_equals_fresh_context(void **state)
{
    (void)state;
    tmodel m;
    spec s = {.arch = "qwen2"};
    const float *lg = NULL;
    float fresh[V];
    tm_build(&m, RVL_TYPE_Q4_1, true, true, 302);
    rvl_model *mod = open_model("reset.gguf", &m, &s);

    rvl_ctx *c = open_ctx(mod, 32, 2);
    assert_int_equal(rvl_decode(c, seq + 3, 6, &lg), 0);
    memcpy(fresh, lg, sizeof fresh);
    rvl_ctx_close(c);

    c = open_ctx(mod, 32, 2);
    const int32_t other[5] = {9, 8, 7, 6, 5};
    assert_int_equal(rvl_decode(c, other, 5, &lg), 0);
    assert_int_equal(rvl_decode(c, other, 5, &lg), 0);
    rvl_ctx_reset(c);
    assert_int_equal(rvl_ctx_pos(c), 0);
    assert_int_equal(rvl_decode(c, seq + 3, 6, &lg), 0);
    assert_memory_equal(lg, fresh, sizeof fresh);
    rvl_ctx_close(c);
    rvl_model_close(mod);
    tm_free(&m);
}

static void check_threads_bit_identical(uint32_t type, const char *arch)
{
    tmodel m;
    bool qwen = strcmp(arch, "qwen2") == 0;
    spec s = {.arch = arch};
    const float *lg = NULL;
    static float logits[3][NSEQ][V];
    char file[64];
    snprintf(file, sizeof file, "threads-%s-%u.gguf", arch, type);
    tm_build(&m, type, qwen, false, 400 + type);
    rvl_model *mod = open_model(file, &m, &s);
    for (uint32_t nt = 1; nt <= 3; nt++) {
        rvl_ctx *c = open_ctx(mod, 32, nt);
        for (int t = 0; t < NSEQ; t++) {
            assert_int_equal(rvl_decode(c, &seq[t], 1, &lg), 0);
            memcpy(logits[nt - 1][t], lg, sizeof logits[0][0]);
        }
        rvl_ctx_close(c);
    }
    for (int t = 0; t < NSEQ; t++) {
        assert_memory_equal(logits[0][t], logits[1][t], sizeof logits[0][0]);
        assert_memory_equal(logits[0][t], logits[2][t], sizeof logits[0][0]);
    }
    rvl_model_close(mod);
    tm_free(&m);
    unlink(tpath(file));
}

static void test_decode_is_bit_identical_for_1_2_3_threads(void **state)
{
    (void)state;
    check_threads_bit_identical(RVL_TYPE_F32, "llama");
    check_threads_bit_identical(RVL_TYPE_Q4_0, "llama");
    check_threads_bit_identical(RVL_TYPE_Q8_0, "qwen2");
}

/* The bytes of m->packed the packed weights fill (the rest of its 2 MiB
 * pages is not written). */
static size_t packed_used(const rvl_model *m)
{
    const char *end = m->packed;
    for (uint32_t l = 0; l <= NL; l++) {
        const rvl_layer *L = &m->layers[l < NL ? l : 0];
        const rvl_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                  &L->w_down, &m->output};
        for (size_t i = l < NL ? 0 : 7; i < 8; i++)
            if (ws[i]->packed) {
                const char *e = (const char *)ws[i]->packed + ws[i]->packed_rows * ws[i]->row_bytes;
                end = e > end ? e : end;
            }
    }
    return (size_t)(end - (const char *)m->packed);
}

/* The load packs on a pool (model.c load_on_pool): every thread count
 * gives the packed copy one thread makes, and the model's tokenizer. */
static void test_model_packs_the_same_bytes_on_1_2_3_threads(void **state)
{
    (void)state;
    const uint32_t types[] = {RVL_TYPE_Q4_0, RVL_TYPE_Q8_0};
    for (size_t k = 0; k < 2; k++) {
        tmodel m;
        spec s = {0};
        tm_build(&m, types[k], false, k == 1, 700 + k);
        assert_int_equal(write_model(tpath("pack-pool.gguf"), &m, &s), 0);
        rvl_model *mod[3] = {NULL};
        for (uint32_t t = 0; t < 3; t++) {
            const rvl_model_params p = {.n_threads = t + 1};
            int rc = rvl_model_open_params(&mod[t], tpath("pack-pool.gguf"), &p);
            if (rc < 0)
                fail_msg("rvl_model_open_params (%u threads): %d %s", t + 1, rc, rvl_errmsg());
            assert_non_null(mod[t]->packed);
            assert_non_null(rvl_model_tokenizer(mod[t]));
            assert_int_equal(mod[t]->packed_bytes, mod[0]->packed_bytes);
            assert_int_equal(mod[t]->output.packed_rows, mod[0]->output.packed_rows);
            assert_memory_equal(mod[t]->packed, mod[0]->packed, packed_used(mod[0]));
        }
        assert_true(mod[0]->output.packed_rows > 0);
        for (int t = 0; t < 3; t++)
            rvl_model_close(mod[t]);
        tm_free(&m);
        unlink(tpath("pack-pool.gguf"));
    }
}

static void test_contexts_share_one_model(void **state)
{
    (void)state;
    tmodel m;
    spec s = {0};
    const float *lg = NULL;
    float a[V];
    tm_build(&m, RVL_TYPE_F32, false, false, 303);
    rvl_model *mod = open_model("shared.gguf", &m, &s);
    rvl_ctx *c1 = open_ctx(mod, 16, 1), *c2 = open_ctx(mod, 16, 1);
    /* interleaved decoding: each context keeps its own cache */
    for (int t = 0; t < 6; t++) {
        assert_int_equal(rvl_decode(c1, &seq[t], 1, &lg), 0);
        memcpy(a, lg, sizeof a);
        assert_int_equal(rvl_decode(c2, &seq[t], 1, &lg), 0);
        assert_memory_equal(a, lg, sizeof a);
    }
    rvl_ctx_close(c1);
    rvl_ctx_close(c2);
    rvl_ctx_close(NULL);
    rvl_model_close(mod);
    rvl_model_close(NULL);
    tm_free(&m);
}

int main(void)
{
#define TEST(f) cmocka_unit_test_teardown(f, free_live)
    const struct CMUnitTest tests[] = {
        TEST(test_model_reads_llama_hyperparameters),
        TEST(test_model_packs_the_same_bytes_on_1_2_3_threads),
        TEST(test_model_detects_tied_output_and_qwen2_flags),
        TEST(test_model_unimplemented_block_feature_is_refused_naming_the_key),
        TEST(test_family_recipe_features_and_layer_kinds),
        TEST(test_model_reads_optional_rope_keys),
        TEST(test_model_missing_key_is_named),
        TEST(test_model_missing_tensor_is_named),
        TEST(test_model_wrong_tensor_shape_is_named),
        TEST(test_model_vocab_size_contradicting_embedding_is_refused),
        TEST(test_model_tokenizer_larger_than_embedding_is_refused),
        TEST(test_model_tokenizer_smaller_than_embedding_is_refused),
        TEST(test_model_non_finite_hyperparameters_are_refused),
        TEST(test_model_unsupported_architecture_is_named),
        TEST(test_model_head_count_kv_must_divide_head_count),
        TEST(test_model_yarn_keys_are_read_and_unknown_scaling_is_named),
        TEST(test_rope_yarn_tables_match_definition),
        TEST(test_model_unusable_tensor_type_is_named),
        TEST(test_model_truncated_or_corrupt_file_is_refused),
        TEST(test_forward_llama_f32_matches_reference),
        TEST(test_forward_llama_tied_f32_matches_reference),
        TEST(test_forward_qwen2_f32_matches_reference),
        TEST(test_forward_llama_with_qkv_biases_uses_or_refuses_them),
        TEST(test_forward_rope_layout_matters),
        TEST(test_forward_partial_rope_and_linear_scaling_match_reference),
        TEST(test_forward_f16_cache_rounds_like_llamacpp),
        TEST(test_forward_quantized_weights_match_reference),
        TEST(test_forward_mixed_weight_types_match_reference),
        TEST(test_decode_context_overflow_leaves_state_usable),
        TEST(test_decode_rejects_invalid_tokens),
        TEST(test_decode_after_reset_equals_fresh_context),
        TEST(test_decode_is_bit_identical_for_1_2_3_threads),
        TEST(test_contexts_share_one_model),
    };
#undef TEST
    return cmocka_run_group_tests_name("model and forward pass", tests, setup_tmpdir,
                                       teardown_tmpdir);
}
