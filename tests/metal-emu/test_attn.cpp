// metal-emu-uses: metal/attn.metal
/*
 * test_attn - metal/attn.metal: flash decode (split-K + reduce) and the
 * fused RoPE + attention prefill, against kernels/ref's attention
 * (rvl_attn_decode / rvl_attn_prefill_ref) and a double-precision oracle.
 *
 * The cache: random keys and values in pages of each format (F16 and F32
 * rows as kernels/attn.h lays them out, any page size; Q8 and TQ4 pages
 * encoded by kernels/kvq.h's rvl_kvq_encode_page), physical pages
 * shuffled, padding between heads and pages, spare pages and unused rows
 * poisoned (NaN): reading anything outside the mask shows. The oracles see
 * what the pages stand for (rvl_kvq_decode_page: unrotated), as f32 rows.
 *
 * Tolerance, per output element (tests/attn_testlib.h's bound, which every
 * CPU variant meets against the same exact softmax):
 *     B = (2^-20 + n * 2^-26 + (A + softcap) * 2^-21) * S
 * S = sum_t p_t |v_td|, n the visible keys, A = max_t scale sum_d |q_d k_td|,
 * plus, for TQ4 pages, log2(hd) * 2^-21 * (scale |q| max_t|k_t| S + |out|)
 * for the float rotations of q and of the output (H D in f32). The kernel
 * must be within B of the exact result and within 2 B of kernels/ref.
 * Decode also compares its partials with kernels/ref's decode_chunk run
 * with the same chunk count, chunk by chunk: the same split of the pages
 * (empty chunks m = -inf, l = 0 on both sides), m and l within 1e-4.
 *
 * Shapes: head_dim 32, 64, 80, 128, 256; GQA ratios 1, 3, 4, 12 (more
 * heads per kv head than a prefill tile holds) and MQA; KV lengths 1, 31,
 * 33, 100, 257 (not multiples of the 32-key block or 16-key tile); page
 * sizes 32, 16 and 7; sliding windows shorter and longer than a page;
 * softcap; q rounded to f16; 1..8 decode chunks (more chunks than pages:
 * empty chunks); prompt offsets p0 > 0 with RoPE normal / NeoX / partial.
 */
#include "mtl_testutil.h"

/* ======================================================================
 * A paged test cache in one format
 * ====================================================================== */
struct mt_cache {
    int fmt, hd, nkh, n_kv, pt;
    size_t head_stride, page_stride;
    std::vector<uint8_t> buf;
    std::vector<float> f;      /* [kh][t][d]: what the rows stand for */
};

static size_t page_bytes(int fmt, int kind, int hd, int pt)
{
    switch (fmt) {
    case RVL_MTL_KV_F32: return (size_t)pt * hd * 4;
    case RVL_MTL_KV_F16: return (size_t)pt * hd * 2;
    default: return rvl_kvq_page_bytes(fmt, kind, hd);
    }
}

static void cache_build(mt_cache &c, int fmt, int kind, int hd, int nkh, int n_kv, int pt,
                        const std::vector<int32_t> &table)
{
    c.fmt = fmt;
    c.hd = hd;
    c.nkh = nkh;
    c.n_kv = n_kv;
    c.pt = pt;
    c.head_stride = page_bytes(fmt, kind, hd, pt) + 16;
    c.page_stride = (size_t)nkh * c.head_stride + 48;
    c.buf.assign(table.size() * c.page_stride, 0xFF);
    c.f.assign((size_t)nkh * n_kv * hd, 0);
    const int n_pages = (n_kv + pt - 1) / pt;
    std::vector<float> rows((size_t)pt * hd);
    for (int kh = 0; kh < nkh; kh++)
        for (int pg = 0; pg < n_pages; pg++) {
            const int n = n_kv - pg * pt < pt ? n_kv - pg * pt : pt;
            for (auto &v : rows)
                v = mt_gauss();
            /* a few large channels, as real keys have */
            for (int j = 0; j < n; j++)
                rows[(size_t)j * hd + (size_t)(kh * 7 % hd)] *= 6;
            uint8_t *page = c.buf.data() + (size_t)table[(size_t)pg] * c.page_stride +
                            (size_t)kh * c.head_stride;
            float *dst = &c.f[((size_t)kh * n_kv + (size_t)pg * pt) * hd];
            if (fmt == RVL_MTL_KV_F32) {
                memcpy(page, rows.data(), (size_t)n * hd * 4);
                memcpy(dst, rows.data(), (size_t)n * hd * 4);
            } else if (fmt == RVL_MTL_KV_F16) {
                for (int i = 0; i < n * hd; i++) {
                    const rvl_f16 h = rvl_f32_to_f16(rows[(size_t)i]);
                    memcpy(page + (size_t)i * 2, &h, 2);
                    dst[i] = rvl_f16_to_f32(h);
                }
            } else {
                rvl_kvq_encode_page(fmt, kind, hd, rows.data(), (size_t)hd, n, page);
                rvl_kvq_decode_page(fmt, kind, hd, page, n, dst, (size_t)hd);
            }
        }
}

/* The rows as an attn.h f32 cache (identity page table, pt positions per
 * page, as the GPU's cache) for kernels/ref. */
struct mt_ref_cache {
    std::vector<float> k, v;
    std::vector<int32_t> table;
    rvl_attn_params p;
};

static void ref_cache(mt_ref_cache &r, const mt_cache &k, const mt_cache &v, int nh, float scale,
                      float softcap, int window, int q_f16)
{
    const int hd = k.hd, nkh = k.nkh, n = k.n_kv, pt = k.pt, np = (n + pt - 1) / pt;
    r.k.assign((size_t)np * nkh * pt * hd, NAN);
    r.v.assign(r.k.size(), NAN);
    r.table.resize((size_t)np);
    for (int i = 0; i < np; i++)
        r.table[(size_t)i] = i;
    for (int kh = 0; kh < nkh; kh++)
        for (int t = 0; t < n; t++) {
            const size_t o = (((size_t)(t / pt) * nkh + kh) * pt + t % pt) * hd;
            memcpy(&r.k[o], &k.f[((size_t)kh * n + t) * hd], (size_t)hd * 4);
            memcpy(&r.v[o], &v.f[((size_t)kh * n + t) * hd], (size_t)hd * 4);
        }
    memset(&r.p, 0, sizeof r.p);
    r.p.head_dim = hd;
    r.p.n_head = nh;
    r.p.n_head_kv = nkh;
    r.p.scale = scale;
    r.p.softcap = softcap;
    r.p.window = window;
    r.p.q_f16 = q_f16;
    r.p.kv_type = RVL_ATTN_F32;
    r.p.page_tokens = pt;
    r.p.k = r.k.data();
    r.p.v = r.v.data();
    r.p.head_stride = (size_t)pt * hd * 4;
    r.p.page_stride = (size_t)nkh * r.p.head_stride;
    r.p.page_table = r.table.data();
}

/* ======================================================================
 * The double-precision oracle and the comparison
 * ====================================================================== */

/* Checks out (hd floats, head h, query q as given to the kernels after
 * RoPE) against the exact attention and the ref result. */
static void compare_head(const char *what, const mt_cache &k, const mt_cache &v, int nh, float scale,
                         float softcap, int window, int q_f16, const float *q, int h, int pos,
                         int n_kv, const float *got, const float *ref, mt_worst &worst)
{
    const int hd = k.hd, kh = h / (nh / k.nkh);
    std::vector<double> qd((size_t)hd);
    double qn = 0;
    for (int d = 0; d < hd; d++) {
        qd[(size_t)d] = q_f16 ? rvl_f16_to_f32(rvl_f32_to_f16(q[d])) : q[d];
        qn += qd[(size_t)d] * qd[(size_t)d];
    }
    qn = sqrt(qn);
    std::vector<double> s, out((size_t)hd, 0), S((size_t)hd, 0);
    std::vector<int> ts;
    double A = 0, kmax = 0, mx = -INFINITY;
    for (int t = 0; t < n_kv; t++) {
        if (t > pos || (window > 0 && t <= pos - window))
            continue;
        const float *kr = &k.f[((size_t)kh * k.n_kv + t) * hd];
        double dot = 0, ad = 0, kn = 0;
        for (int d = 0; d < hd; d++) {
            dot += qd[(size_t)d] * kr[d];
            ad += fabs(qd[(size_t)d] * kr[d]);
            kn += (double)kr[d] * kr[d];
        }
        double x = scale * dot;
        if (softcap > 0)
            x = softcap * tanh(x / softcap);
        A = fmax(A, scale * ad);
        kmax = fmax(kmax, sqrt(kn));
        mx = fmax(mx, x);
        s.push_back(x);
        ts.push_back(t);
    }
    double l = 0;
    for (double &x : s) {
        x = exp(x - mx);
        l += x;
    }
    double on = 0;
    for (size_t i = 0; i < ts.size(); i++) {
        const float *vr = &v.f[((size_t)kh * v.n_kv + ts[i]) * hd];
        for (int d = 0; d < hd; d++) {
            out[(size_t)d] += s[i] / l * vr[d];
            S[(size_t)d] += s[i] / l * fabs(vr[d]);
        }
    }
    for (int d = 0; d < hd; d++)
        on += out[(size_t)d] * out[(size_t)d];
    on = sqrt(on);
    const double n = (double)ts.size();
    const bool tq = k.fmt == RVL_MTL_KV_TQ4 || v.fmt == RVL_MTL_KV_TQ4;
    for (int d = 0; d < hd; d++) {
        double B = (ldexp(1, -20) + n * ldexp(1, -26) + (A + softcap) * ldexp(1, -21)) * S[(size_t)d];
        if (tq)
            B += log2((double)hd) * ldexp(1, -21) * (scale * qn * kmax * S[(size_t)d] + on);
        const double e1 = fabs(got[d] - out[(size_t)d]), e2 = fabs((double)got[d] - ref[d]);
        const bool ok = worst.check(e1, B) && e2 <= 2 * B;
        if (!ok) {
            fprintf(stderr, "%s: head %d pos %d [%d]: got %.9g exact %.9g ref %.9g (bound %.3g)\n", what,
                    h, pos, d, got[d], out[(size_t)d], ref[d], B);
            fail();
        }
    }
}

/* ======================================================================
 * Decode
 * ====================================================================== */
struct dec_shape {
    int kf, vf, hd, nh, nkh, n_kv, q_pos, n_chunks, pt, window;
    float softcap;
    int q_f16;
};

static void decode_case(const dec_shape &s)
{
    const int np = (s.n_kv + s.pt - 1) / s.pt;
    const std::vector<int32_t> table = mt_perm(np + 2);
    mt_cache k, v;
    cache_build(k, s.kf, RVL_KVQ_KEY, s.hd, s.nkh, s.n_kv, s.pt, table);
    cache_build(v, s.vf, RVL_KVQ_VALUE, s.hd, s.nkh, s.n_kv, s.pt, table);
    const float scale = s.softcap > 0 ? 0.5f : 1.0f / sqrtf((float)s.hd);
    std::vector<float> q = mt_gauss_vec((size_t)s.nh * s.hd);

    rvl_mtl_attn_args a = {};
    a.k_page_stride = k.page_stride;
    a.k_head_stride = k.head_stride;
    a.v_page_stride = v.page_stride;
    a.v_head_stride = v.head_stride;
    a.head_dim = s.hd;
    a.n_head = s.nh;
    a.n_head_kv = s.nkh;
    a.scale = scale;
    a.softcap = s.softcap;
    a.window = s.window;
    a.q_f16 = s.q_f16;
    a.k_fmt = s.kf;
    a.v_fmt = s.vf;
    a.page_tokens = s.pt;
    a.q_pos = s.q_pos;
    a.n_kv = s.n_kv;
    a.n_chunks = s.n_chunks;

    emu::Buffer bq(q.data(), q.size() * 4, "q"), bk(k.buf.data(), k.buf.size(), "k");
    emu::Buffer bv(v.buf.data(), v.buf.size(), "v"), bt(table.data(), table.size() * 4, "page_table");
    emu::Buffer bp(rvl_mtl_partials_floats(&a) * 4, "partials");
    emu::Buffer bo((size_t)s.nh * s.hd * 4, "out");
    {
        emu::Encoder e("rvl_attn_decode_f32");
        e.set_value(0, a);
        e.set_buffer(1, bq);
        e.set_buffer(2, bk);
        e.set_buffer(3, bv);
        e.set_buffer(4, bt);
        e.set_buffer(5, bp);
        assert_int_equal(mt_dispatch(e, rvl_mtl_decode_dispatch(&a)), 0);
    }
    {
        emu::Encoder e("rvl_attn_reduce_f32");
        e.set_value(0, a);
        e.set_buffer(1, bp);
        e.set_buffer(2, bo);
        assert_int_equal(mt_dispatch(e, rvl_mtl_reduce_dispatch(&a)), 0);
    }

    /* kernels/ref with the same chunk count over the decoded rows: the
     * same partials chunk by chunk (the same split of the pages: empty
     * chunks have m = -inf, l = 0 on both sides), then the same output */
    mt_ref_cache rc;
    ref_cache(rc, k, v, s.nh, scale, s.softcap, s.window, s.q_f16);
    std::vector<float> ref((size_t)s.nh * s.hd), part(rvl_attn_partials_size(&rc.p, s.n_chunks));
    void *ws = aligned_alloc(64, (rvl_attn_ws_size(&rc.p) + 63) & ~(size_t)63);
    assert_non_null(ws);
    const rvl_attn_kernels *kr = rvl_attn_get_isa(RVL_ISA_REF);
    for (int c = 0; c < s.n_chunks; c++)
        kr->decode_chunk(&rc.p, q.data(), s.q_pos, s.n_kv, c, s.n_chunks, 0, s.nkh, part.data(), ws);
    rvl_attn_decode_reduce(&rc.p, s.n_chunks, part.data(), 0, s.nh, ref.data());
    free(ws);
    for (int c = 0; c < s.n_chunks; c++)
        for (int h = 0; h < s.nh; h++) {
            const float *pg = bp.data<float>() + ((size_t)c * s.nh + h) * (s.hd + 2);
            const float *pr = &part[((size_t)c * s.nh + h) * (s.hd + 2)];
            if (pr[0] == -INFINITY) {
                assert_true(pg[0] == -INFINITY && pg[1] == 0.0f);
                continue;
            }
            /* the running max is a score: within the scores' rounding */
            assert_true(fabsf(pg[0] - pr[0]) <= 1e-4f * (1 + fabsf(pr[0])));
            assert_true(fabsf(pg[1] - pr[1]) <= 1e-4f * pr[1]);
        }

    char what[128];
    snprintf(what, sizeof what, "decode k=%d v=%d hd=%d %d/%d n_kv=%d chunks=%d pt=%d win=%d cap=%g",
             s.kf, s.vf, s.hd, s.nh, s.nkh, s.n_kv, s.n_chunks, s.pt, s.window, s.softcap);
    mt_worst worst("decode");
    for (int h = 0; h < s.nh; h++)
        compare_head(what, k, v, s.nh, scale, s.softcap, s.window, s.q_f16, &q[(size_t)h * s.hd], h,
                     s.q_pos, s.n_kv, bo.data<float>() + (size_t)h * s.hd, &ref[(size_t)h * s.hd], worst);
}

static void test_decode_f16_f32_pages(void **state)
{
    (void)state;
    const int F16 = RVL_MTL_KV_F16, F32 = RVL_MTL_KV_F32;
    const dec_shape cases[] = {
        /* kf vf  hd  nh nkh n_kv q_pos chunks pt win cap q16 */
        { F16, F16, 64, 4, 4, 1, 0, 1, 32, 0, 0, 0 },
        { F16, F16, 64, 8, 2, 100, 99, 3, 32, 0, 0, 1 },
        { F16, F16, 80, 6, 2, 257, 256, 8, 16, 0, 0, 0 },
        { F32, F32, 128, 4, 1, 33, 32, 2, 7, 0, 0, 0 },
        { F16, F32, 32, 12, 1, 31, 30, 4, 32, 0, 0, 0 },
        { F16, F16, 256, 2, 1, 70, 69, 8, 32, 0, 0, 1 },   /* more chunks than pages */
        { F16, F16, 64, 4, 2, 200, 199, 4, 16, 40, 0, 0 }, /* window */
        { F16, F16, 64, 4, 2, 100, 60, 3, 32, 7, 0, 0 },   /* q_pos < n_kv - 1, short window */
        { F32, F16, 64, 3, 1, 90, 89, 2, 32, 0, 5.0f, 0 }, /* softcap */
    };
    for (const dec_shape &s : cases)
        decode_case(s);
}

static void test_decode_quantized_pages(void **state)
{
    (void)state;
    const int F16 = RVL_MTL_KV_F16, Q8 = RVL_MTL_KV_Q8, TQ4 = RVL_MTL_KV_TQ4;
    const dec_shape cases[] = {
        { Q8, Q8, 64, 4, 4, 1, 0, 1, 32, 0, 0, 0 },
        { Q8, Q8, 80, 8, 2, 100, 99, 3, 32, 0, 0, 0 },   /* a short last Q8 group */
        { TQ4, TQ4, 64, 8, 2, 257, 256, 4, 32, 0, 0, 0 },
        { TQ4, TQ4, 128, 4, 1, 33, 32, 8, 32, 0, 0, 0 },
        { TQ4, TQ4, 256, 2, 2, 65, 64, 2, 32, 0, 0, 0 },
        { Q8, TQ4, 64, 6, 2, 120, 119, 3, 32, 50, 0, 0 },
        { TQ4, F16, 32, 4, 1, 31, 30, 1, 32, 0, 5.0f, 0 },
        { F16, Q8, 128, 4, 2, 64, 63, 2, 32, 0, 0, 1 },
    };
    for (const dec_shape &s : cases)
        decode_case(s);
}

/* ======================================================================
 * Prefill with fused RoPE
 * ====================================================================== */
struct pf_shape {
    int kf, vf, hd, nh, nkh, p0, nq, pt, window;
    float softcap;
    int q_f16, rope_mode, rope_dim;
};

static void prefill_case(const pf_shape &s)
{
    const int n_kv = s.p0 + s.nq, np = (n_kv + s.pt - 1) / s.pt;
    const std::vector<int32_t> table = mt_perm(np + 1);
    mt_cache k, v;
    cache_build(k, s.kf, RVL_KVQ_KEY, s.hd, s.nkh, n_kv, s.pt, table);
    cache_build(v, s.vf, RVL_KVQ_VALUE, s.hd, s.nkh, n_kv, s.pt, table);
    const float scale = s.softcap > 0 ? 0.5f : 1.0f / sqrtf((float)s.hd);
    const size_t qs = (size_t)s.nh * s.hd + 5, os = (size_t)s.nh * s.hd + 3;
    std::vector<float> q = mt_gauss_vec((size_t)s.nq * qs);
    const int rd = s.rope_dim ? s.rope_dim : s.hd;
    std::vector<float> cs, sn;
    mt_rope_tables(n_kv + 3, rd, 10000.0f, cs, sn);

    rvl_mtl_attn_args a = {};
    a.k_page_stride = k.page_stride;
    a.k_head_stride = k.head_stride;
    a.v_page_stride = v.page_stride;
    a.v_head_stride = v.head_stride;
    a.q_stride = qs;
    a.out_stride = os;
    a.head_dim = s.hd;
    a.n_head = s.nh;
    a.n_head_kv = s.nkh;
    a.scale = scale;
    a.softcap = s.softcap;
    a.window = s.window;
    a.q_f16 = s.q_f16;
    a.k_fmt = s.kf;
    a.v_fmt = s.vf;
    a.page_tokens = s.pt;
    a.p0 = s.p0;
    a.n_q = s.nq;
    a.rope_mode = s.rope_mode;
    a.rope_dim = rd;

    emu::Buffer bq(q.data(), q.size() * 4, "q"), bk(k.buf.data(), k.buf.size(), "k");
    emu::Buffer bv(v.buf.data(), v.buf.size(), "v"), bt(table.data(), table.size() * 4, "page_table");
    emu::Buffer bo((size_t)s.nq * os * 4, "out");
    emu::Buffer bc(cs.data(), cs.size() * 4, "cos"), bs(sn.data(), sn.size() * 4, "sin");
    emu::Encoder e("rvl_attn_prefill_f32");
    e.set_value(0, a);
    e.set_buffer(1, bq);
    e.set_buffer(2, bk);
    e.set_buffer(3, bv);
    e.set_buffer(4, bt);
    e.set_buffer(5, bo);
    e.set_buffer(6, bc);
    e.set_buffer(7, bs);
    assert_int_equal(mt_dispatch(e, rvl_mtl_prefill_dispatch(&a)), 0);

    /* the oracles get q after RoPE (forward.c's rope on the host) */
    std::vector<float> qr = q;
    for (int i = 0; i < s.nq; i++)
        for (int h = 0; h < s.nh; h++) {
            const size_t o = (size_t)(s.p0 + i) * (rd / 2);
            mt_rope_head(&qr[i * qs + (size_t)h * s.hd], s.rope_mode, rd, &cs[o], &sn[o]);
        }
    mt_ref_cache rc;
    ref_cache(rc, k, v, s.nh, scale, s.softcap, s.window, s.q_f16);
    std::vector<float> ref((size_t)s.nq * os, NAN);
    void *ws = aligned_alloc(64, (rvl_attn_ws_size(&rc.p) + 63) & ~(size_t)63);
    assert_non_null(ws);
    rvl_attn_prefill_ref(&rc.p, qr.data(), qs, s.p0, s.nq, 0, s.nkh, ref.data(), os, ws);
    free(ws);

    char what[160];
    snprintf(what, sizeof what,
             "prefill k=%d v=%d hd=%d %d/%d p0=%d nq=%d pt=%d win=%d cap=%g q16=%d rope=%d/%d", s.kf,
             s.vf, s.hd, s.nh, s.nkh, s.p0, s.nq, s.pt, s.window, s.softcap, s.q_f16, s.rope_mode, rd);
    mt_worst worst("prefill");
    const float *out = bo.data<float>();
    for (int i = 0; i < s.nq; i++) {
        for (int h = 0; h < s.nh; h++)
            compare_head(what, k, v, s.nh, scale, s.softcap, s.window, s.q_f16,
                         &qr[i * qs + (size_t)h * s.hd], h, s.p0 + i, n_kv,
                         out + i * os + (size_t)h * s.hd, &ref[i * os + (size_t)h * s.hd], worst);
        for (size_t d = (size_t)s.nh * s.hd; d < os && i + 1 < s.nq; d++) {
            uint32_t bits;
            memcpy(&bits, out + i * os + d, 4);
            assert_int_equal(bits, 0xFFFFFFFFu);   /* row padding untouched */
        }
    }
}

static void test_prefill_f16_f32_pages_with_rope(void **state)
{
    (void)state;
    const int F16 = RVL_MTL_KV_F16, F32 = RVL_MTL_KV_F32;
    const int N = RVL_MTL_ROPE_NONE, R = RVL_MTL_ROPE_NORM, X = RVL_MTL_ROPE_NEOX;
    const pf_shape cases[] = {
        /* kf vf  hd  nh nkh p0 nq  pt win cap q16 rope rd */
        { F16, F16, 64, 4, 4, 0, 1, 32, 0, 0, 0, N, 0 },
        { F16, F16, 64, 4, 4, 0, 13, 32, 0, 0, 0, R, 0 },
        { F16, F16, 64, 6, 2, 37, 21, 16, 0, 0, 1, X, 0 },      /* g = 3: 2-token tiles */
        { F32, F32, 80, 8, 2, 5, 33, 7, 0, 0, 0, R, 0 },        /* odd page size */
        { F16, F16, 32, 12, 1, 10, 9, 32, 0, 0, 0, X, 16 },     /* g = 12: two head groups */
        { F16, F16, 128, 4, 1, 0, 40, 32, 7, 0, 0, R, 64 },     /* window, partial rotary */
        { F16, F32, 64, 2, 2, 50, 30, 32, 40, 0, 0, X, 0 },     /* window > page */
        { F16, F16, 256, 2, 1, 3, 17, 32, 0, 5.0f, 0, R, 0 },   /* softcap, hd 256 */
        { F32, F16, 64, 16, 1, 0, 5, 32, 0, 0, 1, N, 0 },       /* MQA, g = 16 */
    };
    for (const pf_shape &s : cases)
        prefill_case(s);
}

static void test_prefill_quantized_pages(void **state)
{
    (void)state;
    const int F16 = RVL_MTL_KV_F16, Q8 = RVL_MTL_KV_Q8, TQ4 = RVL_MTL_KV_TQ4;
    const int R = RVL_MTL_ROPE_NORM, X = RVL_MTL_ROPE_NEOX;
    const pf_shape cases[] = {
        { Q8, Q8, 80, 4, 2, 20, 25, 32, 0, 0, 0, R, 0 },
        { TQ4, TQ4, 64, 8, 2, 33, 31, 32, 0, 0, 0, X, 0 },
        { TQ4, F16, 128, 4, 4, 0, 9, 32, 20, 0, 0, R, 0 },
        { Q8, TQ4, 32, 3, 1, 64, 7, 32, 0, 5.0f, 1, X, 0 },
    };
    for (const pf_shape &s : cases)
        prefill_case(s);
}

/* Decode and prefill under other thread and threadgroup orders. */
static void test_attention_under_other_thread_orders(void **state)
{
    (void)state;
    for (uint64_t seed : { 9ull, 4242ull }) {
        emu::set_seed(seed);
        decode_case({ RVL_MTL_KV_TQ4, RVL_MTL_KV_Q8, 64, 8, 2, 100, 99, 3, 32, 0, 0, 0 });
        prefill_case({ RVL_MTL_KV_F16, RVL_MTL_KV_F16, 64, 6, 2, 37, 21, 16, 9, 0, 0,
                       RVL_MTL_ROPE_NEOX, 0 });
    }
    emu::set_seed(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_f16_f32_pages),
        cmocka_unit_test(test_decode_quantized_pages),
        cmocka_unit_test(test_prefill_f16_f32_pages_with_rope),
        cmocka_unit_test(test_prefill_quantized_pages),
        cmocka_unit_test(test_attention_under_other_thread_orders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
