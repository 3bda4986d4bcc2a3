/*
 * test_kvcache_mla.c - MLA's latent cache (lib/engine/kvcache.h v_is_k):
 * one shared key row per token, K = [c ; k_pe], whose rows are also the
 * values (each output head is sum_t p_t k_t; the forward pass keeps its
 * first kv_lora_rank dims).
 *
 *  - attention against a double-precision softmax(scale q.k) K over the
 *    rows the cache holds (decoded), for f32, f16, q8 and tiered f16 -> q8
 *    -> q8, head_dim 40 and 576 (DeepSeek's 512 + 64), prompt batches and
 *    single-token decode, 4 query heads on the one kv head; on f32 and f16
 *    the same bits as an ordinary cache given the keys as values;
 *  - no key centering (values read from centred keys would be k - mu);
 *  - the bytes reported (rvl_kvcache_usage, rvl_kvcache_tier_token_bytes)
 *    are half those of the same cache with value pages;
 *  - a session file (version 5, flag bit 1, key pages only) round trip
 *    gives the same bits of attention; a file and a cache that disagree
 *    about v_is_k are refused, naming MLA's latent cache, and so does
 *    kv-inspect, which does not read version 5;
 *  - truncation (into a quantized page) and prefix reuse from the LRU of
 *    dropped pages keep the keys;
 *  - a context shift rotates dims rope_off .. rope_off + rope_dim only;
 *  - formats whose key and value pages differ (q4, tq4, tq3, tiered with
 *    a 4-bit cold tier) are refused at open.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/kvcache.h"
#include "kvcache_testlib.h"
#include "engine/session_fmt.h"
#include "ruvllm_tools.h"

#define NL 2
#define NH 4
#define NCTX 256
#define MAXHD 576
#define U RVL_KVC_UNBOUNDED
enum { F16 = RVL_KVQ_F16, Q8 = RVL_KVQ_Q8, Q4 = RVL_KVQ_Q4, TQ4 = RVL_KVQ_TQ4, TQ3 = RVL_KVQ_TQ3,
       F32 = RVL_KVF_F32 };

static uint64_t rng = 0x5eed1234;

static double gauss(void) { return kvt_gauss(&rng); }


/* keys (layer, pos, hd) with a common offset of 2 in every channel (so that
 * centring, were it on, would move the values) and a channel of 6x; queries
 * (pos, NH * hd) */
static float K[NL][NCTX][MAXHD], Q[NCTX][NH * MAXHD];

static void make_data(int hd)
{
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NCTX; p++)
            for (int i = 0; i < hd; i++)
                K[l][p][i] = (float)(gauss() * (i == 3 ? 6.0 : 1.0) + 2.0);
    for (int p = 0; p < NCTX; p++)
        for (int i = 0; i < NH * hd; i++)
            Q[p][i] = (float)gauss();
}

static rvl_kvcache_params mla(int hd, const int fmt[3], uint32_t hot, uint32_t warm)
{
    rvl_kvcache_params p = {.n_layer = NL, .n_head = NH, .n_head_kv = 1, .head_dim = (uint32_t)hd,
                            .n_ctx = NCTX, .hot = hot, .warm = warm,
                            .scale = 1.0f / sqrtf((float)hd), .v_is_k = true};
    memcpy(p.fmt_k, fmt, sizeof p.fmt_k);
    memcpy(p.fmt_v, fmt, sizeof p.fmt_v);
    return p;
}



/* Feeds positions rvl_kvcache_n .. n - 1 in batches of the sizes given
 * (cycled; 1: decode), checks each query's attention against ref_attn over
 * the cache's own rows, and that the value side reads the key rows. twin:
 * an ordinary cache given the keys as values, or NULL: its attention must
 * give the same bits. Returns max |out - ref| / max |k|. */
static double feed(rvl_kvcache *kc, rvl_kvcache *twin, rvl_pool *pool, int hd, int n,
                   const int *batches, int nbatches)
{
    static float out[32][NH * MAXHD], out2[32][NH * MAXHD], ck[NCTX * MAXHD], cv[NCTX * MAXHD];
    const double scale = 1.0 / sqrt((double)hd);
    double err = 0, kmax = 0;
    int pos = (int)rvl_kvcache_n(kc), bi = 0;
    while (pos < n) {
        int nb = batches[bi++ % nbatches];
        nb = nb > n - pos ? n - pos : nb;
        rvl_kvcache_begin(kc, (uint32_t)nb);
        if (twin)
            rvl_kvcache_begin(twin, (uint32_t)nb);
        for (int l = 0; l < NL; l++) {
            rvl_kvcache_write(kc, (uint32_t)l, (uint32_t)pos, (uint32_t)nb, K[l][pos], MAXHD, NULL, 0);
            if (twin)
                rvl_kvcache_write(twin, (uint32_t)l, (uint32_t)pos, (uint32_t)nb, K[l][pos], MAXHD,
                                  K[l][pos], MAXHD);
        }
        for (int l = 0; l < NL; l++) {
            rvl_kvcache_attend(kc, pool, (uint32_t)l, Q[pos], NH * MAXHD, (uint32_t)pos,
                               (uint32_t)nb, out[0], NH * MAXHD);
            if (twin) {
                rvl_kvcache_attend(twin, pool, (uint32_t)l, Q[pos], NH * MAXHD, (uint32_t)pos,
                                   (uint32_t)nb, out2[0], NH * MAXHD);
                for (int t = 0; t < nb; t++)
                    assert_memory_equal(out[t], out2[t], (size_t)NH * hd * sizeof(float));
            }
            kvt_cache_rows(kc, (uint32_t)l, 0, (uint32_t)(pos + nb), 1, hd, ck);
            kvt_cache_rows(kc, (uint32_t)l, 1, (uint32_t)(pos + nb), 1, hd, cv);
            assert_memory_equal(ck, cv, (size_t)(pos + nb) * hd * sizeof(float));
            for (int i = 0; i < (pos + nb) * hd; i++)
                kmax = fmax(kmax, fabs(ck[i]));
            for (int t = 0; t < nb; t++)
                for (int h = 0; h < NH; h++) {
                    static double r[MAXHD];
                    kvt_ref_attn(Q[pos + t] + (size_t)h * hd, ck, ck, (size_t)hd, pos + t + 1, hd,
                                 scale, -INFINITY, r);
                    for (int e = 0; e < hd; e++)
                        err = fmax(err, fabs(out[t][h * hd + e] - r[e]));
                }
        }
        rvl_kvcache_commit(kc, (uint32_t)nb);
        if (twin)
            rvl_kvcache_commit(twin, (uint32_t)nb);
        pos += nb;
    }
    return err / kmax;
}

static const struct {
    const char *name;
    int fmt[3];
    uint32_t hot, warm;
} formats[] = {
    {"f32", {F32, F32, F32}, U, U},
    {"f16", {F16, F16, F16}, U, U},
    {"q8", {F16, Q8, Q8}, 0, U},
    {"tiered 32/64/q8", {F16, Q8, Q8}, 32, 64},
};

static void test_mla_attention_is_softmax_of_the_keys_times_the_keys(void **state)
{
    (void)state;
    static const int hds[] = {40, 576};
    static const int prompt[] = {32, 7, 19, 32, 1, 25};
    static const int decode[] = {1};
    rvl_pool *pool = NULL;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
        make_data(hds[a]);
        for (size_t f = 0; f < sizeof formats / sizeof *formats; f++) {
            rvl_kvcache_params p = mla(hds[a], formats[f].fmt, formats[f].hot, formats[f].warm);
            rvl_kvcache *kc = NULL, *twin = NULL;
            assert_int_equal(rvl_kvcache_open(&kc, &p, 2), 0);
            const bool full = formats[f].fmt[1] == F32 || formats[f].fmt[1] == F16;
            if (full) { /* no centring either way: the same kernels on the same rows */
                rvl_kvcache_params tp = p;
                tp.v_is_k = false;
                assert_int_equal(rvl_kvcache_open(&twin, &tp, 2), 0);
            }
            const double e1 = feed(kc, twin, pool, hds[a], 160, prompt, 6);
            const double e2 = feed(kc, twin, pool, hds[a], 200, decode, 1);
            if (e1 > 3e-5 || e2 > 3e-5)
                fail_msg("%s hd %d: error / max|k| %g (prompt), %g (decode)", formats[f].name,
                         hds[a], e1, e2);
            if (!full) { /* pages were quantized, and without a centre */
                assert_int_not_equal(rvl_kvcache_page_tier(kc, 0, 0), 0);
                assert_null(rvl_kvcache_key_center(kc));
            }
            if (formats[f].hot == 32)
                assert_int_equal(rvl_kvcache_page_tier(kc, 1, 0), 2);
            rvl_kvcache_close(kc);
            rvl_kvcache_close(twin);
        }
    }
    rvl_pool_close(pool);
}

static void test_mla_cache_reports_only_the_key_bytes(void **state)
{
    (void)state;
    for (size_t f = 0; f < sizeof formats / sizeof *formats; f++) {
        rvl_kvcache_params p = mla(576, formats[f].fmt, formats[f].hot, formats[f].warm), q = p;
        q.v_is_k = false;
        rvl_kvcache *a = NULL, *b = NULL;
        assert_int_equal(rvl_kvcache_open(&a, &p, 1), 0);
        assert_int_equal(rvl_kvcache_open(&b, &q, 1), 0);
        for (uint32_t n = 1; n <= NCTX; n += 37) {
            rvl_kv_usage ua, ub;
            rvl_kvcache_usage(a, n, &ua);
            rvl_kvcache_usage(b, n, &ub);
            assert_true(ua.bytes > 0);
            assert_true(2 * ua.bytes == ub.bytes);
            assert_true(2 * ua.bytes_untrimmed == ub.bytes_untrimmed);
        }
        for (int t = 0; t < 3; t++)
            assert_true(2 * rvl_kvcache_tier_token_bytes(a, t) == rvl_kvcache_tier_token_bytes(b, t));
        /* the hot tier: one 576-dim head per token and layer */
        assert_true(rvl_kvcache_tier_token_bytes(a, 0) ==
                    NL * 576 * (formats[f].fmt[0] == F32 ? 4 : 2));
        rvl_kvcache_close(a);
        rvl_kvcache_close(b);
    }
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void test_mla_session_round_trip_keeps_the_bits(void **state)
{
    (void)state;
    static const int prompt[] = {32, 5, 32};
    static float o1[NH * MAXHD], o2[NH * MAXHD];
    const int hd = 576, n = 150;
    make_data(hd);
    char path[64];
    strcpy(path, "/tmp/rvl-mla-XXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int32_t ids[NCTX];
    for (int i = 0; i < NCTX; i++)
        ids[i] = i * 7 % 1000;
    for (size_t f = 0; f < sizeof formats / sizeof *formats; f++) {
        const rvl_kvcache_params p = mla(hd, formats[f].fmt, formats[f].hot, formats[f].warm);
        rvl_kvcache *a = NULL, *b = NULL;
        assert_int_equal(rvl_kvcache_open(&a, &p, 1), 0);
        assert_int_equal(rvl_kvcache_open(&b, &p, 1), 0);
        feed(a, NULL, NULL, hd, n, prompt, 3);
        assert_int_equal(rvl_session_save_kvc(a, 42, path, ids, (size_t)n, "{}"), 0);
        size_t size;
        unsigned char *file = slurp(path, &size);
        /* version 5, flag bit 1; the first KV block (after tokens and
         * extra: no centre) holds one key page and no value page */
        assert_int_equal(rvl_session_get32(file + RVL_SESS_H_VERSION), 5);
        assert_int_equal(rvl_session_get32(file + RVL_SESS_H_FLAGS), RVL_SESS_F_V_IS_K);
        size_t off = RVL_SESS_HDR;
        for (int i = 0; i < 2; i++)
            off += RVL_SESS_BLK + rvl_session_get32(file + off + RVL_SESS_B_STORED);
        assert_int_equal(rvl_session_get32(file + off + RVL_SESS_B_KIND), RVL_SESS_KV);
        assert_int_equal(rvl_session_get32(file + off + RVL_SESS_B_RAW),
                         rvl_kvcache_page_bytes(a, 0, rvl_kvcache_page_tier(a, 0, 0)));
        /* kv-inspect does not read version 5 and says what it holds */
        rvl_kv_inspect *kvi = (rvl_kv_inspect *)1;
        assert_int_equal(rvl_kv_inspect_open_mem(&kvi, path, file, size), RVL_EUNSUPPORTED);
        assert_non_null(strstr(rvl_errmsg(), "MLA's latent cache"));
        int32_t *got = NULL;
        size_t ng = 0;
        char *extra = NULL;
        assert_int_equal(rvl_session_load_kvc(b, 42, 1000, path, file, size, &got, &ng, &extra), 0);
        assert_int_equal(ng, (size_t)n);
        assert_memory_equal(got, ids, (size_t)n * sizeof *ids);
        free(got);
        free(extra);
        /* the next token on both: the same bits */
        for (int i = 0; i < 3; i++) {
            const uint32_t pos = (uint32_t)n + (uint32_t)i;
            rvl_kvcache_begin(a, 1);
            rvl_kvcache_begin(b, 1);
            for (uint32_t l = 0; l < NL; l++) {
                rvl_kvcache_write(a, l, pos, 1, K[l][pos], MAXHD, NULL, 0);
                rvl_kvcache_write(b, l, pos, 1, K[l][pos], MAXHD, NULL, 0);
                rvl_kvcache_attend(a, NULL, l, Q[pos], 0, pos, 1, o1, 0);
                rvl_kvcache_attend(b, NULL, l, Q[pos], 0, pos, 1, o2, 0);
                assert_memory_equal(o1, o2, (size_t)NH * hd * sizeof(float));
            }
            rvl_kvcache_commit(a, 1);
            rvl_kvcache_commit(b, 1);
        }
        /* a cache with value pages refuses the file, and the other way round */
        rvl_kvcache_params q = p;
        q.v_is_k = false;
        rvl_kvcache *c = NULL;
        assert_int_equal(rvl_kvcache_open(&c, &q, 1), 0);
        assert_int_equal(rvl_session_load_kvc(c, 42, 1000, path, file, size, &got, &ng, &extra),
                         RVL_EFORMAT);
        assert_non_null(strstr(rvl_errmsg(), "MLA's latent cache"));
        assert_int_equal(rvl_kvcache_n(c), 0);
        rvl_kvcache_close(a);
        a = NULL;
        assert_int_equal(rvl_kvcache_open(&a, &q, 1), 0);
        rvl_kvcache_begin(a, 40);
        for (uint32_t l = 0; l < NL; l++)
            rvl_kvcache_write(a, l, 0, 40, K[l][0], MAXHD, K[l][0], MAXHD);
        rvl_kvcache_commit(a, 40);
        assert_int_equal(rvl_session_save_kvc(a, 42, path, ids, 40, NULL), 0);
        free(file);
        file = slurp(path, &size);
        assert_int_equal(rvl_session_load_kvc(b, 42, 1000, path, file, size, &got, &ng, &extra),
                         RVL_EFORMAT);
        assert_non_null(strstr(rvl_errmsg(), "MLA's latent cache"));
        assert_int_equal(rvl_kvcache_n(b), 0);
        free(file);
        rvl_kvcache_close(a);
        rvl_kvcache_close(b);
        rvl_kvcache_close(c);
    }
    unlink(path);
}

/* max |cache row - K| / max |K| over positions 0 .. n - 1 of every layer */
static double key_error(rvl_kvcache *kc, int hd, uint32_t n)
{
    static float ck[NCTX * MAXHD];
    double err = 0, kmax = 0;
    for (uint32_t l = 0; l < NL; l++) {
        kvt_cache_rows(kc, l, 1, n, 1, hd, ck); /* the value side: the keys */
        for (uint32_t t = 0; t < n; t++)
            for (int e = 0; e < hd; e++) {
                err = fmax(err, fabs(ck[(size_t)t * hd + e] - K[l][t][e]));
                kmax = fmax(kmax, fabs(K[l][t][e]));
            }
    }
    return n ? err / kmax : 0;
}

static void test_mla_truncate_and_prefix_reuse_keep_the_keys(void **state)
{
    (void)state;
    static const int prompt[] = {32, 9};
    const int hd = 40;
    make_data(hd);
    int32_t ids[NCTX];
    for (int i = 0; i < NCTX; i++)
        ids[i] = i * 13 % 500;
    for (size_t f = 0; f < sizeof formats / sizeof *formats; f++) {
        const rvl_kvcache_params p = mla(hd, formats[f].fmt, formats[f].hot, formats[f].warm);
        const double tol = formats[f].fmt[1] == F32 ? 0 : formats[f].fmt[1] == F16 ? 1e-3 : 1e-2;
        rvl_kvcache *kc = NULL;
        assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
        feed(kc, NULL, NULL, hd, 200, prompt, 2);
        rvl_kvcache_set_ids(kc, 0, ids, 200);
        assert_int_equal(rvl_kvcache_truncate(kc, 70), 0); /* page 2 back to tier 0 */
        assert_int_equal(rvl_kvcache_page_tier(kc, 0, 2), 0);
        assert_true(key_error(kc, hd, 70) <= tol);
        const double e = feed(kc, NULL, NULL, hd, 130, prompt, 2);
        assert_true(e < 3e-5);
        assert_true(key_error(kc, hd, 130) <= tol);
        rvl_kvcache_set_ids(kc, 0, ids, 130);
        int32_t other[NCTX];
        memcpy(other, ids, sizeof other);
        other[100] = -1; /* a prompt that differs from position 100 on */
        assert_int_equal(rvl_kvcache_reuse(kc, other, 130), 100);
        assert_true(key_error(kc, hd, 100) <= tol);
        assert_true(feed(kc, NULL, NULL, hd, 150, prompt, 2) < 3e-5);
        rvl_kvcache_set_ids(kc, 0, ids, 150);
        rvl_kvcache_reset(kc); /* its hashed pages go to the LRU, if the cache has room for one */
        const uint32_t k = rvl_kvcache_reuse(kc, ids, 150);
        assert_true(k % 32 == 0);
        if (formats[f].fmt[1] == F32)
            assert_true(k >= 32); /* room for one page in its LRU */
        assert_true(key_error(kc, hd, k) <= tol);
        assert_true(feed(kc, NULL, NULL, hd, 180, prompt, 2) < 3e-5);
        assert_true(key_error(kc, hd, 180) <= tol);
        rvl_kvcache_close(kc);
    }
}

static void test_mla_context_shift_rotates_only_the_rope_dims(void **state)
{
    (void)state;
    const int hd = 40, off = 32, rd = 8, n = 100, keep = 10, drop = 30;
    make_data(hd);
    static const int fmt[3] = {F32, F32, F32};
    rvl_kvcache_params p = mla(hd, fmt, U, U);
    p.rope_off = off;
    rvl_kvcache *kc = NULL;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    static const int prompt[] = {32};
    feed(kc, NULL, NULL, hd, n, prompt, 1);
    static float before[NL][NCTX * 40], after[NCTX * 40];
    for (uint32_t l = 0; l < NL; l++)
        kvt_cache_rows(kc, l, 0, n, 1, hd, before[l]);
    float cs[4], sn[4];
    for (int i = 0; i < rd / 2; i++) {
        const double a = drop * pow(10000.0, -2.0 * i / rd);
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
    assert_int_equal(rvl_kvcache_shift(kc, keep, drop, cs, sn, NULL, NULL, 10, false), RVL_EINVAL);
    assert_int_equal(rvl_kvcache_shift(kc, keep, drop, cs, sn, NULL, NULL, rd, false), 0);
    assert_int_equal(rvl_kvcache_n(kc), n - drop);
    for (uint32_t l = 0; l < NL; l++) {
        kvt_cache_rows(kc, l, 0, n - drop, 1, hd, after);
        for (int t = 0; t < n - drop; t++) {
            const float *o = before[l] + (size_t)(t < keep ? t : t + drop) * hd, *r = after + (size_t)t * hd;
            for (int e = 0; e < off; e++) /* the latent: untouched */
                assert_true(r[e] == o[e]);
            for (int i = 0; i < rd / 2; i++) {
                const double x0 = o[off + 2 * i], x1 = o[off + 2 * i + 1];
                const double c = t < keep ? 1 : cs[i], s = t < keep ? 0 : sn[i];
                assert_true(fabs(r[off + 2 * i] - (x0 * c + x1 * s)) < 1e-5);
                assert_true(fabs(r[off + 2 * i + 1] - (-x0 * s + x1 * c)) < 1e-5);
            }
        }
        /* the values are the keys, moved and rotated with them */
        kvt_cache_rows(kc, l, 1, n - drop, 1, hd, before[l]);
        assert_memory_equal(before[l], after, (size_t)(n - drop) * hd * sizeof(float));
    }
    rvl_kvcache_close(kc);
}

static void test_mla_cache_refuses_formats_with_two_layouts(void **state)
{
    (void)state;
    static const struct {
        int k[3], v[3];
        uint32_t hot, warm;
    } bad[] = {
        {{F16, Q4, Q4}, {F16, Q4, Q4}, 0, U},
        {{F16, TQ4, TQ4}, {F16, TQ4, TQ4}, 0, U},
        {{F16, TQ3, TQ3}, {F16, TQ3, TQ3}, 0, U},
        {{F16, Q8, TQ4}, {F16, Q8, TQ4}, 256, 2048},
        {{F16, Q8, Q4}, {F16, Q8, Q4}, 256, 2048},
        {{F16, Q8, Q8}, {F16, F16, F16}, 0, U},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rvl_kvcache_params p = mla(576, bad[i].k, bad[i].hot, bad[i].warm);
        memcpy(p.fmt_v, bad[i].v, sizeof p.fmt_v);
        rvl_kvcache *kc = (rvl_kvcache *)1;
        assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
        assert_null(kc);
        assert_non_null(strstr(rvl_errmsg(), "MLA's latent cache"));
    }
    static const int f16[3] = {F16, F16, F16};
    rvl_kvcache_params p = mla(40, f16, U, U);
    p.rope_off = 40;
    rvl_kvcache *kc = NULL;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mla_attention_is_softmax_of_the_keys_times_the_keys),
        cmocka_unit_test(test_mla_cache_reports_only_the_key_bytes),
        cmocka_unit_test(test_mla_session_round_trip_keeps_the_bits),
        cmocka_unit_test(test_mla_truncate_and_prefix_reuse_keep_the_keys),
        cmocka_unit_test(test_mla_context_shift_rotates_only_the_rope_dims),
        cmocka_unit_test(test_mla_cache_refuses_formats_with_two_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
