/*
 * test_kv_inspect.c - the session-file inspector (lib/tools/kv_inspect.c) and
 * `ruvllm kv-inspect --json`.
 *
 * Version 2 files are built here byte by byte from the layout in
 * docs/formats.md (independently of lib/engine/session.c's writer) with
 * synthetic keys whose statistics are known: a Gaussian head with one
 * channel 20 times larger (an outlier; kurtosis far above 3, near 3 after
 * the Walsh-Hadamard rotation). Files the library writes itself
 * (rvl_session_save on the tiny model) check the reader against the
 * writer, the diff of two prompts and the command's JSON.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <xxhash.h>
#include <zstd.h>

#include "kvq.h"
#include "ruvllm.h"
#include "ruvllm_tools.h"

#define TINY "tests/data/tiny/llama.gguf"
#define NL 2
#define NH 2
#define HD 64
#define OUTLIER_CH 5

/* ---- a little v2 writer ---- */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} buf;

static void put(buf *o, const void *p, size_t n)
{
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->b = realloc(o->b, o->cap);
        assert_non_null(o->b);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put32(buf *o, uint32_t v)
{
    unsigned char p[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(o, p, 4);
}

static void put64(buf *o, uint64_t v)
{
    put32(o, (uint32_t)v);
    put32(o, (uint32_t)(v >> 32));
}

static void block(buf *o, uint32_t kind, uint32_t layer, uint32_t page, const unsigned char fmt[4],
                  const void *raw, size_t n)
{
    size_t cap = ZSTD_compressBound(n);
    void *z = malloc(cap);
    assert_non_null(z);
    size_t zn = ZSTD_compress(z, cap, raw, n, 3);
    assert_false(ZSTD_isError(zn));
    put32(o, kind);
    put32(o, layer);
    put32(o, page);
    static const unsigned char zero[4];
    put(o, fmt ? fmt : zero, 4);
    put32(o, (uint32_t)n);
    put32(o, (uint32_t)zn);
    put64(o, XXH3_64bits(z, zn));
    put(o, z, zn);
    free(z);
}

/* Deterministic N(0, 1) (Box-Muller over an LCG). */
static uint64_t rng = 42;
static float gauss(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((rng >> 11) + 1.0) / 9007199254740993.0;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

/* The synthetic key (or value) of head h at position t: Gaussian, with
 * channel OUTLIER_CH of the keys 20 times larger. */
static void vec(int kind, float *x)
{
    for (int c = 0; c < HD; c++)
        x[c] = gauss() * (kind == 0 && c == OUTLIER_CH ? 20.0f : 1.0f);
}

/* A version 2 file of n tokens (pages of 32). Page p of every layer is in
 * tier tiers[p] with the formats kf/vf of that tier. */
static buf make_v2(uint32_t n, const int kf[3], const int vf[3], uint32_t hot, const int *tiers)
{
    buf o = {0};
    unsigned char magic[8] = "RVLSESS";
    put(&o, magic, 8);
    put32(&o, 2);
    put32(&o, 0x01020304u);
    put64(&o, 0x1234567890abcdefull);
    put32(&o, NL);
    put32(&o, NH);
    put32(&o, HD);
    put32(&o, 32);
    put32(&o, n);
    for (int t = 0; t < 3; t++)
        put32(&o, (uint32_t)kf[t]);
    for (int t = 0; t < 3; t++)
        put32(&o, (uint32_t)vf[t]);
    put32(&o, hot);
    put32(&o, UINT32_MAX);
    put32(&o, 0);
    put64(&o, XXH3_64bits(o.b, 80));

    int32_t *ids = malloc(4 * (size_t)n + 1);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i * 7 % 100);
    block(&o, 1, 0, 0, NULL, ids, 4 * (size_t)n);
    free(ids);
    block(&o, 2, 0, 0, NULL, "{}", 2);

    unsigned char *raw = malloc(1 << 20);
    float x[32 * HD];
    for (uint32_t l = 0; l < NL; l++)
        for (uint32_t p = 0; p * 32 < n; p++) {
            uint32_t np = n - p * 32 < 32 ? n - p * 32 : 32;
            int tier = tiers[p];
            size_t off = 0;
            for (int kind = 0; kind < 2; kind++) {
                int fmt = kind ? vf[tier] : kf[tier];
                for (int h = 0; h < NH; h++) {
                    memset(x, 0, sizeof x);
                    for (uint32_t t = 0; t < np; t++)
                        vec(kind, x + t * HD);
                    size_t pb;
                    if (fmt == RVL_KVI_F32) {
                        pb = sizeof x;
                        memcpy(raw + off, x, pb);
                    } else {
                        pb = rvl_kvq_page_bytes(fmt, kind, HD);
                        memset(raw + off, 0, pb);
                        rvl_kvq_encode_page(fmt, kind, HD, x, HD, (int)np, raw + off);
                    }
                    off += pb;
                }
            }
            unsigned char f4[4] = {(unsigned char)kf[tier], (unsigned char)vf[tier],
                                   (unsigned char)tier, (unsigned char)np};
            block(&o, 3, l, p, f4, raw, off);
        }
    free(raw);
    put64(&o, XXH3_64bits(o.b, o.n));
    return o;
}

static const int F32x3[3] = {RVL_KVI_F32, RVL_KVI_F32, RVL_KVI_F32};
static const int tiers0[4] = {0, 0, 0, 0};

static void test_kvi_reads_v2_geometry_tokens_and_blocks(void **state)
{
    (void)state;
    buf o = make_v2(40, F32x3, F32x3, UINT32_MAX, tiers0);
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "v2", o.b, o.n), 0);
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(f);
    assert_true(rvl_kv_inspect_intact(f));
    assert_int_equal(in->version, 2);
    assert_int_equal(in->n_layer, NL);
    assert_int_equal(in->n_head_kv, NH);
    assert_int_equal(in->head_dim, HD);
    assert_int_equal(in->n_tokens, 40);
    assert_true(in->fingerprint == 0x1234567890abcdefull);
    assert_int_equal(rvl_kv_inspect_n_blocks(f), 2 + NL * 2);
    assert_non_null(in->tokens);
    assert_int_equal(in->tokens[3], 21);
    assert_string_equal(in->extra, "{}");
    const rvl_kv_inspect_blockinfo *last = rvl_kv_inspect_block(f, rvl_kv_inspect_n_blocks(f) - 1);
    assert_int_equal(last->layer, 1);
    assert_int_equal(last->page, 1);
    assert_int_equal(last->n_pos, 8);
    assert_int_equal(last->k_bytes, NH * 32 * HD * 4);
    rvl_kv_inspect_close(f);
    free(o.b);
}

static void test_kvi_stats_find_outlier_channel_and_rotation_flattens_it(void **state)
{
    (void)state;
    buf o = make_v2(64, F32x3, F32x3, UINT32_MAX, tiers0);
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "v2", o.b, o.n), 0);
    rvl_kv_inspect_head *h;
    size_t n;
    assert_int_equal(rvl_kv_inspect_stats(f, NULL, &h, &n), 0);
    assert_int_equal(n, NL * NH * 2);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(h[i].n_pos, 64);
        assert_int_equal(h[i].n_pos_exact, 64);
        if (h[i].kind == 0) {
            /* one channel 20x the others: it alone is an outlier; pooled
             * coordinates are heavy-tailed, rotated ones near-Gaussian */
            assert_int_equal(h[i].n_outliers, 1);
            assert_int_equal(h[i].outliers[0], OUTLIER_CH);
            assert_int_equal(h[i].absmax_channel, OUTLIER_CH);
            /* (the rotated coordinates of a vector share its outlier
             * draw, so the pooled estimate is noisier than 64 * 64
             * independent samples would give) */
            assert_true(h[i].kurtosis > 50);
            assert_true(h[i].kurtosis_rotated > 2.5 && h[i].kurtosis_rotated < 5);
        } else {
            assert_int_equal(h[i].n_outliers, 0);
            assert_true(h[i].kurtosis > 2.5 && h[i].kurtosis < 3.6);
        }
        /* more bits, less error; f16 of f32 data is nearly exact */
        assert_true(h[i].rel_mse[RVL_KVI_F16] < 1e-6);
        assert_true(h[i].rel_mse[RVL_KVI_Q8] < h[i].rel_mse[RVL_KVI_Q4]);
        assert_true(h[i].rel_mse[RVL_KVI_TQ4] < h[i].rel_mse[RVL_KVI_TQ3]);
        /* TurboQuant's error on Gaussian input is its codebook's MSE */
        assert_true(fabs(h[i].rel_mse[RVL_KVI_TQ4] - rvl_kvq_codebook_mse(16)) < 0.004);
    }
    rvl_kv_inspect_stats_free(h, n);
    rvl_kv_inspect_close(f);
    free(o.b);
}

static void test_kvi_reconstruction_error_only_from_full_precision_pages(void **state)
{
    (void)state;
    /* tiered: page 0 (8 positions behind the newest, hot = 8) is warm q8,
     * the partial page 1 is hot f16 */
    const int kf[3] = {RVL_KVI_F16, RVL_KVI_Q8, RVL_KVI_TQ4};
    const int tiers[2] = {1, 0};
    buf o = make_v2(40, kf, kf, 8, tiers);
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "tiered", o.b, o.n), 0);
    assert_true(rvl_kv_inspect_intact(f));
    assert_int_equal(rvl_kv_inspect_block(f, 2)->k_fmt, RVL_KVI_Q8);
    assert_int_equal(rvl_kv_inspect_block(f, 2)->tier, 1);
    assert_int_equal(rvl_kv_inspect_block(f, 2)->k_bytes, NH * rvl_kvq_page_bytes(RVL_KVQ_Q8, 0, HD));
    rvl_kv_inspect_head *h;
    size_t n;
    assert_int_equal(rvl_kv_inspect_stats(f, NULL, &h, &n), 0);
    assert_int_equal(h[0].n_pos_fmt[RVL_KVI_Q8], 32);
    assert_int_equal(h[0].n_pos_fmt[RVL_KVI_F16], 8);
    assert_int_equal(h[0].n_pos_exact, 8);   /* only the f16 page's rows */
    assert_true(h[0].rel_mse[RVL_KVI_Q8] > 0);
    assert_int_equal(h[0].outliers[0], OUTLIER_CH);
    rvl_kv_inspect_stats_free(h, n);
    rvl_kv_inspect_close(f);

    /* all pages quantized: not computable */
    const int tiers1[2] = {1, 1};
    buf q = make_v2(64, kf, kf, 0, tiers1);
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "q8", q.b, q.n), 0);
    assert_true(rvl_kv_inspect_intact(f));
    assert_int_equal(rvl_kv_inspect_stats(f, NULL, &h, &n), 0);
    assert_int_equal(h[0].n_pos_exact, 0);
    assert_true(isnan(h[0].rel_mse[RVL_KVI_Q8]));
    assert_false(isnan(h[0].kurtosis_rotated));
    rvl_kv_inspect_stats_free(h, n);
    rvl_kv_inspect_close(f);
    free(o.b);
    free(q.b);
}

static void test_kvi_names_the_block_with_a_bad_checksum(void **state)
{
    (void)state;
    buf o = make_v2(40, F32x3, F32x3, UINT32_MAX, tiers0);
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, o.n), 0);
    uint64_t off = rvl_kv_inspect_block(f, 4)->offset;   /* layer 1, page 0 */
    rvl_kv_inspect_close(f);
    o.b[off + 32 + 10] ^= 0x10;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, o.n), 0);
    assert_false(rvl_kv_inspect_intact(f));
    assert_false(rvl_kv_inspect_info_get(f)->file_ok);
    assert_true(rvl_kv_inspect_info_get(f)->header_ok);
    for (size_t i = 0; i < rvl_kv_inspect_n_blocks(f); i++)
        assert_int_equal(rvl_kv_inspect_block(f, i)->status, i == 4 ? RVL_KVI_BAD_CHECKSUM : RVL_KVI_OK);
    assert_non_null(strstr(rvl_kv_inspect_problem(f, 0), "(layer 1, page 0): checksum mismatch"));
    char want[64];
    snprintf(want, sizeof want, "offset %llu", (unsigned long long)off);
    assert_non_null(strstr(rvl_kv_inspect_problem(f, 0), want));
    float k[32 * NH * HD], v[32 * NH * HD];
    uint32_t np;
    assert_int_equal(rvl_kv_inspect_page(f, 4, k, v, &np), RVL_EFORMAT);
    assert_int_equal(rvl_kv_inspect_page(f, 3, k, v, &np), 0);   /* the others still read */
    assert_int_equal(np, 8);
    rvl_kv_inspect_head *h;
    size_t n;
    assert_int_equal(rvl_kv_inspect_stats(f, NULL, &h, &n), 0);
    assert_int_equal(h[2 * NH].n_pos, 8);   /* layer 1: only page 1 */
    rvl_kv_inspect_stats_free(h, n);
    rvl_kv_inspect_close(f);
    free(o.b);
}

static void test_kvi_reports_truncation_and_missing_blocks(void **state)
{
    (void)state;
    buf o = make_v2(40, F32x3, F32x3, UINT32_MAX, tiers0);
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, o.n), 0);
    uint64_t off = rvl_kv_inspect_block(f, 3)->offset;   /* layer 0, page 1 */
    rvl_kv_inspect_close(f);
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "cut", o.b, off + 100), 0);
    assert_false(rvl_kv_inspect_intact(f));
    assert_int_equal(rvl_kv_inspect_n_blocks(f), 4);
    assert_int_equal(rvl_kv_inspect_block(f, 3)->status, RVL_KVI_TRUNCATED);
    assert_int_equal(rvl_kv_inspect_block(f, 2)->status, RVL_KVI_OK);
    assert_non_null(rvl_kv_inspect_info_get(f)->tokens);
    bool missing = false;
    for (size_t i = 0; i < rvl_kv_inspect_n_problems(f); i++)
        missing |= strstr(rvl_kv_inspect_problem(f, i), "missing: 2 of the 6 blocks") != NULL;
    assert_true(missing);
    rvl_kv_inspect_close(f);
    free(o.b);
}

static void test_kvi_refuses_what_is_not_a_session(void **state)
{
    (void)state;
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", "GGUF\3\0\0\0\0\0\0\0\0\0\0\0", 16), RVL_EFORMAT);
    assert_null(f);
    buf o = make_v2(5, F32x3, F32x3, UINT32_MAX, tiers0);
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, 60), RVL_EFORMAT);
    assert_non_null(strstr(rvl_errmsg(), "truncated"));
    o.b[12] = 1;   /* the byte-order mark as a big-endian writer puts it */
    o.b[15] = 4;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, o.n), RVL_EUNSUPPORTED);
    free(o.b);
}

static void test_kvi_rejects_page_formats_that_are_not_their_tiers(void **state)
{
    (void)state;
    buf o = make_v2(40, F32x3, F32x3, UINT32_MAX, tiers0);
    rvl_kv_inspect *f;
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, o.n), 0);
    uint64_t off = rvl_kv_inspect_block(f, 2)->offset;
    rvl_kv_inspect_close(f);
    o.b[off + 12] = RVL_KVI_F16;   /* the block header is not checksummed by its block hash */
    assert_int_equal(rvl_kv_inspect_open_mem(&f, "x", o.b, o.n), 0);
    assert_int_equal(rvl_kv_inspect_block(f, 2)->status, RVL_KVI_BAD_DATA);
    assert_non_null(strstr(rvl_kv_inspect_problem(f, 0), "are not tier 0's f32/f32"));
    rvl_kv_inspect_close(f);
    free(o.b);
}

/* ---- files the library writes ---- */

static rvl_model *tiny;

static void save_prompt(const char *path, const int32_t *ids, size_t n)
{
    rvl_ctx *c;
    rvl_ctx_params p = {.n_ctx = 64, .n_threads = 1};
    assert_int_equal(rvl_ctx_open(&c, tiny, &p), 0);
    const float *logits;
    assert_int_equal(rvl_decode(c, ids, (uint32_t)n, &logits), 0);
    assert_int_equal(rvl_session_save(c, path, ids, n, "{\"k\":1}"), 0);
    rvl_ctx_close(c);
}

/* A tq4 cache stores its keys centred (kvcache.c "Key centering"): the file
 * says so, carries the centre, and the inspector adds it back, so the f16
 * sink page's keys equal an f16 cache's for the same tokens (to f16's
 * rounding of k - centre). */
static void test_kvi_adds_the_key_centre_back(void **state)
{
    (void)state;
    char pq[64], pf[64];
    snprintf(pq, sizeof pq, "/tmp/rvl-kvi-q-%d.rvls", (int)getpid());
    snprintf(pf, sizeof pf, "/tmp/rvl-kvi-f-%d.rvls", (int)getpid());
    int32_t ids[100];
    for (int i = 0; i < 100; i++)
        ids[i] = (i * 29 + 3) % 200;
    const rvl_kv_type kt[2] = {RVL_KV_TQ4, RVL_KV_F16};
    const char *paths[2] = {pq, pf};
    for (int i = 0; i < 2; i++) {
        rvl_ctx *c;
        rvl_ctx_params p = {.n_ctx = 128, .n_threads = 1, .kv_type = kt[i]};
        assert_int_equal(rvl_ctx_open(&c, tiny, &p), 0);
        const float *logits;
        assert_int_equal(rvl_decode(c, ids, 100, &logits), 0);
        assert_int_equal(rvl_session_save(c, paths[i], ids, 100, NULL), 0);
        rvl_ctx_close(c);
    }
    rvl_kv_inspect *fq, *ff;
    assert_int_equal(rvl_kv_inspect_open(&fq, pq), 0);
    assert_int_equal(rvl_kv_inspect_open(&ff, pf), 0);
    const rvl_kv_inspect_info *iq = rvl_kv_inspect_info_get(fq), *iff = rvl_kv_inspect_info_get(ff);
    assert_true(rvl_kv_inspect_intact(fq));
    assert_int_equal(iq->version, 3);
    assert_true(iq->key_centre);
    assert_non_null(iq->centre);
    assert_false(iff->key_centre);
    assert_null(iff->centre);
    assert_int_equal(rvl_kv_inspect_n_blocks(fq), iq->n_blocks_expected);
    assert_int_equal(rvl_kv_inspect_block(fq, 3)->kind, RVL_KVI_BLK_CENTER); /* after model, tokens, extra */
    const size_t kd = iq->kv_dim;
    float *kq = malloc(32 * kd * sizeof(float)), *vq = malloc(32 * kd * sizeof(float));
    float *kf = malloc(32 * kd * sizeof(float)), *vf = malloc(32 * kd * sizeof(float));
    double cmax = 0;
    for (size_t i = 0; i < (size_t)iq->n_layer * kd; i++)
        cmax = fmax(cmax, fabs(iq->centre[i]));
    assert_true(cmax > 0.01); /* a real centre, not zeros */
    for (uint32_t l = 0; l < iq->n_layer; l++) {
        uint32_t nq, nf;
        assert_int_equal(rvl_kv_inspect_page(fq, (size_t)rvl_kv_inspect_find_page(fq, l, 0), kq, vq, &nq), 0);
        assert_int_equal(rvl_kv_inspect_page(ff, (size_t)rvl_kv_inspect_find_page(ff, l, 0), kf, vf, &nf), 0);
        assert_int_equal(nq, 32);
        for (size_t i = 0; i < 32 * kd; i++)
            assert_true(fabsf(kq[i] - kf[i]) <= 2e-3f * (fabsf(kf[i]) + (float)cmax));
    }
    free(kq), free(vq), free(kf), free(vf);
    rvl_kv_inspect_close(fq);
    rvl_kv_inspect_close(ff);
    unlink(pq);
    unlink(pf);
}

static void test_kvi_reads_what_session_save_writes_and_diffs_two_prompts(void **state)
{
    (void)state;
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "/tmp/rvl-kvi-a-%d.rvls", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/rvl-kvi-b-%d.rvls", (int)getpid());
    int32_t a[37], b[37];
    for (int i = 0; i < 37; i++)
        a[i] = b[i] = (i * 13 + 5) % 200;
    b[34] = 199;
    save_prompt(pa, a, 37);
    save_prompt(pb, b, 37);
    rvl_kv_inspect *fa, *fb;
    assert_int_equal(rvl_kv_inspect_open(&fa, pa), 0);
    assert_int_equal(rvl_kv_inspect_open(&fb, pb), 0);
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(fa);
    assert_true(rvl_kv_inspect_intact(fa));
    assert_int_equal(in->n_tokens, 37);
    assert_int_equal(in->n_layer, rvl_model_hparams(tiny)->n_layer);
    assert_memory_equal(in->tokens, a, sizeof a);
    assert_string_equal(in->extra, "{\"k\":1}");
    assert_int_equal(rvl_kv_inspect_n_blocks(fa), in->n_blocks_expected);

    rvl_kv_inspect_diffres d;
    assert_int_equal(rvl_kv_inspect_diff(fa, fb, &d), 0);
    assert_int_equal(d.common, 34);
    assert_int_equal(d.first_diff, 34);
    assert_true(d.same_model && d.same_geometry);
    for (uint32_t l = 0; l < d.n_layer; l++) {
        /* the same prefix computed the same way: identical */
        assert_true(d.k_maxdiff[l] == 0);
        assert_true(d.v_maxdiff[l] == 0);
    }
    rvl_kv_inspect_diff_free(&d);
    assert_int_equal(rvl_kv_inspect_diff(fa, fa, &d), 0);
    assert_int_equal(d.first_diff, -1);
    assert_int_equal(d.common, 37);
    rvl_kv_inspect_diff_free(&d);

    /* the command's JSON parses and says the same */
    const char *r = getenv("RUVLLM");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s kv-inspect --json -m %s %s", r && *r ? r : "build/ruvllm", TINY,
             pa);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    assert_int_equal(pclose(p), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_int_equal(cJSON_GetObjectItem(j, "n_tokens")->valuedouble, 37);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "intact")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "matches")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")), 37);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "heads")),
                     2 * in->n_layer * rvl_model_hparams(tiny)->n_head_kv);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "blocks")), in->n_blocks_expected);
    cJSON_Delete(j);

    rvl_kv_inspect_close(fa);
    rvl_kv_inspect_close(fb);
    unlink(pa);
    unlink(pb);
}

static int setup(void **state)
{
    (void)state;
    return rvl_model_open(&tiny, TINY);
}

static int teardown(void **state)
{
    (void)state;
    rvl_model_close(tiny);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvi_reads_v2_geometry_tokens_and_blocks),
        cmocka_unit_test(test_kvi_stats_find_outlier_channel_and_rotation_flattens_it),
        cmocka_unit_test(test_kvi_reconstruction_error_only_from_full_precision_pages),
        cmocka_unit_test(test_kvi_names_the_block_with_a_bad_checksum),
        cmocka_unit_test(test_kvi_reports_truncation_and_missing_blocks),
        cmocka_unit_test(test_kvi_refuses_what_is_not_a_session),
        cmocka_unit_test(test_kvi_rejects_page_formats_that_are_not_their_tiers),
        cmocka_unit_test(test_kvi_adds_the_key_centre_back),
        cmocka_unit_test(test_kvi_reads_what_session_save_writes_and_diffs_two_prompts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
