/*
 * attn_testlib.h - test harness of the attention kernels (kernels/attn.h),
 * shared by tests/test_attn.c (cmocka, every x86 variant) and
 * tests/neon/test_attn_neon.c (TAP under qemu-aarch64): kernels/ and libc
 * only.
 *
 * A test cache holds random keys and values in pages whose physical order
 * is shuffled, with padding between kv heads and pages, spare pages, and
 * the rows past the last position, all filled with NaN: a kernel that
 * reads anything it should not gives NaN. Workspaces start as NaN too.
 *
 * The oracle is a double-precision softmax(scale * q.k) v over the keys
 * the mask leaves (spelled out here, not taken from attn.h), on the
 * values the kernel sees (f16 K/V widened; q rounded to f16 when q_f16),
 * with tanh soft-capping and, when the shape asks for them, attention-sink
 * logits (one per query head, in the denominator only). A kernel result is accepted per element when
 *
 *     |out - exact| <= (2^-20 + n * 2^-26 + (A + softcap) * 2^-21) * S
 *
 * S = sum_t p_t |v_t| (the magnitude the output is made of), n the number
 * of keys, A = max_t scale * sum_d |q_d k_td| (the magnitude of the
 * scores before rounding). Why: an f32 dot product is off by up to
 * ~hd * 2^-24 * A in the worst case, ~sqrt(hd / lanes) * 2^-24 * A in
 * practice (lanes and trees shorten the chains), and each weight moves by
 * that relative amount, hence the A term; tanh adds a few ulp of softcap;
 * the sums of the weights and of p * v run over n terms in f32 (n * 2^-24
 * relative at worst, random walks in practice: n * 2^-26 has margin for
 * the n of the tests); exp is within ~2 ulp, as is the merge of chunks
 * (the 2^-20 floor). With unit-variance data and n = 1000 the bound is
 * ~1e-5 relative. Observed: at most 0.26 of the bound (ref), 0.11 (avx2,
 * avx512); test_attn prints the ratios with ATTN_VERBOSE=1.
 *
 * The includer defines ATTN_CHECK(cond) (a failed assertion) before
 * including this file.
 */
#ifndef RVL_TESTS_ATTN_TESTLIB_H
#define RVL_TESTS_ATTN_TESTLIB_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "dispatch.h"
#include "f16.h"

/* ======================================================================
 * Random numbers (splitmix64, fixed seed)
 * ====================================================================== */

static uint64_t at_rng = 0x6A09E667F3BCC909ull;

static uint64_t at_u64(void)
{
    uint64_t z = (at_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double at_unif(void) /* (0, 1) */
{
    return ((double)(at_u64() >> 11) + 0.5) / 9007199254740992.0;
}

static float at_gauss(void)
{
    return (float)(sqrt(-2 * log(at_unif())) * cos(6.283185307179586 * at_unif()));
}

static void *at_alloc(size_t n)
{
    void *p = aligned_alloc(64, ((n ? n : 1) + 63) & ~(size_t)63);
    ATTN_CHECK(p != NULL);
    if (!p)
        exit(1);
    return p;
}

static void at_fill_nan(void *p, size_t bytes)
{
    memset(p, 0xff, bytes); /* 0xffff / 0xffffffff: NaN in f16 and f32 */
}

/* ======================================================================
 * A paged cache with random contents
 * ====================================================================== */

typedef struct {
    rvl_attn_params p;
    int n_kv;
    void *kbuf, *vbuf;
    int32_t *table;
    float *sinks;   /* (n_head) or NULL */
    float *kf, *vf; /* what the kernel sees, [kv head][t][d] */
} at_cache;

typedef struct {
    int head_dim, n_head, n_head_kv, n_kv, page_tokens, kv_type;
    float softcap;
    int window, q_f16;
} at_shape;

/* Attention-sink logits of the caches made while it is not 0: sink_h =
 * at_sink_amp * N(0, 1), head 0's -inf and, with 3 or more heads, head 2's
 * 8 * at_sink_amp (it dominates the softmax). */
static float at_sink_amp;

static void at_cache_init(at_cache *c, const at_shape *s)
{
    const int hd = s->head_dim, pt = s->page_tokens, nkh = s->n_head_kv;
    const size_t es = s->kv_type == RVL_ATTN_F16 ? 2 : 4;
    const int n_pages = (s->n_kv + pt - 1) / pt, n_phys = n_pages + 2;
    memset(c, 0, sizeof *c);
    c->n_kv = s->n_kv;
    c->p.head_dim = hd;
    c->p.n_head = s->n_head;
    c->p.n_head_kv = nkh;
    c->p.scale = 1.0f / sqrtf((float)hd);
    c->p.softcap = s->softcap;
    c->p.window = s->window;
    c->p.q_f16 = s->q_f16;
    c->p.kv_type = s->kv_type;
    c->p.page_tokens = pt;
    c->p.head_stride = (size_t)pt * hd * es + 16;      /* padding: misaligned rows */
    c->p.page_stride = (size_t)nkh * c->p.head_stride + 48;
    const size_t bytes = (size_t)n_phys * c->p.page_stride;
    c->kbuf = at_alloc(bytes);
    c->vbuf = at_alloc(bytes);
    at_fill_nan(c->kbuf, bytes);
    at_fill_nan(c->vbuf, bytes);
    c->p.k = c->kbuf;
    c->p.v = c->vbuf;
    /* physical pages: a random permutation of n_phys, first n_pages used */
    int32_t *perm = at_alloc((size_t)n_phys * sizeof *perm);
    for (int i = 0; i < n_phys; i++)
        perm[i] = i;
    for (int i = n_phys - 1; i > 0; i--) {
        const int j = (int)(at_u64() % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    c->table = perm;
    c->p.page_table = perm;
    if (at_sink_amp != 0) {
        c->sinks = at_alloc((size_t)s->n_head * sizeof *c->sinks);
        for (int h = 0; h < s->n_head; h++)
            c->sinks[h] = h == 0 ? -INFINITY : h == 2 ? 8 * at_sink_amp : at_sink_amp * at_gauss();
        c->p.sinks = c->sinks;
    }
    const size_t nv = (size_t)nkh * (size_t)(s->n_kv ? s->n_kv : 1) * hd;
    c->kf = at_alloc(nv * sizeof(float));
    c->vf = at_alloc(nv * sizeof(float));
    for (int kh = 0; kh < nkh; kh++)
        for (int t = 0; t < s->n_kv; t++)
            for (int kind = 0; kind < 2; kind++) {
                char *row = (char *)(kind ? c->vbuf : c->kbuf) +
                            (size_t)perm[t / pt] * c->p.page_stride + (size_t)kh * c->p.head_stride +
                            (size_t)(t % pt) * hd * es;
                float *dst = (kind ? c->vf : c->kf) + ((size_t)kh * s->n_kv + t) * hd;
                for (int d = 0; d < hd; d++) {
                    float x = at_gauss();
                    if (s->kv_type == RVL_ATTN_F16) {
                        const rvl_f16 h = rvl_f32_to_f16(x);
                        memcpy(row + (size_t)d * 2, &h, 2);
                        x = rvl_f16_to_f32(h);
                    } else {
                        memcpy(row + (size_t)d * 4, &x, 4);
                    }
                    dst[d] = x;
                }
            }
}

static void at_cache_free(at_cache *c)
{
    free(c->kbuf);
    free(c->vbuf);
    free(c->table);
    free(c->sinks);
    free(c->kf);
    free(c->vf);
}

/* n floats, gaussian times amp */
static float *at_rand_vec(size_t n, float amp)
{
    float *q = at_alloc(n * sizeof *q);
    for (size_t i = 0; i < n; i++)
        q[i] = at_gauss() * amp;
    return q;
}

/* ======================================================================
 * The oracle and the comparison
 * ====================================================================== */

/* The exact attention of head h for a query q (head_dim floats) at q_pos
 * over [0, n_kv): out[d], S[d] = sum p |v_d|; returns the bound's factor
 * (see the top of this file). */
static double at_exact(const at_cache *c, const float *q, int h, int q_pos, int n_kv, double *out,
                       double *S)
{
    const rvl_attn_params *p = &c->p;
    const int hd = p->head_dim, kh = h / (p->n_head / p->n_head_kv);
    /* the mask, spelled out independently of attn.h */
    int lo = 0, hi = n_kv - 1;
    while (lo < n_kv && p->window > 0 && !(lo > q_pos - p->window))
        lo++;
    while (hi >= 0 && hi > q_pos)
        hi--;
    for (int d = 0; d < hd; d++)
        out[d] = S[d] = 0;
    if (lo > hi)
        return 0;
    const int n = hi - lo + 1;
    double *s = malloc((size_t)n * sizeof *s);
    ATTN_CHECK(s != NULL);
    if (!s)
        exit(1);
    double mx = -INFINITY, A = 0;
    for (int t = lo; t <= hi; t++) {
        const float *k = c->kf + ((size_t)kh * c->n_kv + t) * hd;
        double dot = 0, mag = 0;
        for (int d = 0; d < hd; d++) {
            const double qd = p->q_f16 ? rvl_f16_to_f32(rvl_f32_to_f16(q[d])) : q[d];
            dot += qd * k[d];
            mag += fabs(qd * k[d]);
        }
        double x = dot * p->scale;
        if (mag * p->scale > A)
            A = mag * p->scale;
        if (p->softcap > 0)
            x = p->softcap * tanh(x / p->softcap);
        s[t - lo] = x;
        if (x > mx)
            mx = x;
    }
    const double sink = p->sinks ? p->sinks[h] : -INFINITY; /* a column without value */
    if (sink > mx)
        mx = sink;
    double sum = p->sinks ? exp(sink - mx) : 0;
    for (int i = 0; i < n; i++)
        sum += (s[i] = exp(s[i] - mx));
    for (int t = lo; t <= hi; t++) {
        const double pr = s[t - lo] / sum;
        const float *v = c->vf + ((size_t)kh * c->n_kv + t) * hd;
        for (int d = 0; d < hd; d++) {
            out[d] += pr * v[d];
            S[d] += pr * fabs(v[d]);
        }
    }
    free(s);
    return ldexp(1, -20) + n * ldexp(1, -26) + (A + p->softcap) * ldexp(1, -21);
}

/* The exact answer for every head of one query token (q: n_head *
 * head_dim floats) at q_pos. */
typedef struct {
    int n_head, hd;
    double *ex, *S, *f; /* [n_head][hd], [n_head][hd], [n_head] */
} at_ref;

static void at_ref_make(at_ref *r, const at_cache *c, const float *q, int q_pos, int n_kv)
{
    const int hd = c->p.head_dim, nh = c->p.n_head;
    r->n_head = nh;
    r->hd = hd;
    r->ex = at_alloc((2 * (size_t)nh * hd + nh) * sizeof(double));
    r->S = r->ex + (size_t)nh * hd;
    r->f = r->S + (size_t)nh * hd;
    for (int h = 0; h < nh; h++)
        r->f[h] = at_exact(c, q + (size_t)h * hd, h, q_pos, n_kv, r->ex + (size_t)h * hd,
                           r->S + (size_t)h * hd);
}

static void at_ref_free(at_ref *r)
{
    free(r->ex);
}

/* The worst |got - exact| / bound over every element; NaN or infinity
 * gives 1e30, and so does anything but 0 for a query without keys. */
static double at_ref_check(const at_ref *r, const float *got)
{
    double worst = 0;
    for (int h = 0; h < r->n_head; h++)
        for (int d = 0; d < r->hd; d++) {
            const size_t i = (size_t)h * r->hd + d;
            const double g = got[i], e = fabs(g - r->ex[i]);
            double q;
            if (!isfinite(g))
                q = 1e30;
            else if (r->f[h] == 0)
                q = g == 0 ? 0 : 1e30;
            else
                q = e / (r->f[h] * r->S[i] + 1e-37);
            if (q > worst)
                worst = q;
        }
    return worst;
}

/* ======================================================================
 * Running the kernels (with NaN-filled workspaces and guarded outputs)
 * ====================================================================== */

#define AT_GUARD 16

static int at_guard_ok(const float *p, size_t n)
{
    for (size_t i = 0; i < AT_GUARD; i++) {
        uint32_t u;
        memcpy(&u, p + n + i, 4);
        if (u != 0xdeadbeefu)
            return 0;
    }
    return 1;
}

static float *at_guarded(size_t n)
{
    float *p = at_alloc((n + AT_GUARD) * sizeof *p);
    at_fill_nan(p, n * sizeof *p);
    for (size_t i = 0; i < AT_GUARD; i++) {
        const uint32_t u = 0xdeadbeefu;
        memcpy(p + n + i, &u, 4);
    }
    return p;
}

/* decode of one query token with n_chunks chunks; chunk order reversed
 * and kv heads one at a time, as threads might run them. out: n_head *
 * head_dim floats. */
static void at_decode(const rvl_attn_kernels *kk, const at_cache *c, const float *q, int q_pos,
                      int n_kv, int n_chunks, float *out)
{
    const rvl_attn_params *p = &c->p;
    const size_t wsb = rvl_attn_ws_size(p), np = rvl_attn_partials_size(p, n_chunks);
    void *ws = at_alloc(wsb);
    at_fill_nan(ws, wsb);
    float *part = at_guarded(np);
    for (int ch = n_chunks - 1; ch >= 0; ch--)
        for (int kh = 0; kh < p->n_head_kv; kh++)
            kk->decode_chunk(p, q, q_pos, n_kv, ch, n_chunks, kh, kh + 1, part, ws);
    ATTN_CHECK(at_guard_ok(part, np));
    rvl_attn_decode_reduce(p, n_chunks, part, 0, p->n_head, out);
    free(ws);
    free(part);
}

/* prefill of nq tokens at p0.. (q: nq rows of q_stride floats), split
 * into token ranges of `split` tokens (threads). */
static void at_prefill(const rvl_attn_kernels *kk, const at_cache *c, const float *q,
                       size_t q_stride, int p0, int nq, int split, float *out, size_t out_stride)
{
    const rvl_attn_params *p = &c->p;
    const size_t wsb = rvl_attn_ws_size(p);
    void *ws = at_alloc(wsb);
    at_fill_nan(ws, wsb);
    for (int t0 = 0; t0 < nq; t0 += split) {
        const int n = nq - t0 < split ? nq - t0 : split;
        kk->prefill(p, q + (size_t)t0 * q_stride, q_stride, p0 + t0, n, 0, p->n_head_kv,
                    out + (size_t)t0 * out_stride, out_stride, ws);
    }
    free(ws);
}

/* ======================================================================
 * The checks: every variant this machine runs against the oracle
 * ====================================================================== */

/* the worst error / bound seen, per variant and cache type */
static double at_worst[RVL_ISA_COUNT][2];

static void at_note(int isa, int type, double r)
{
    if (r > at_worst[isa][type])
        at_worst[isa][type] = r;
}

/* decode of one random query (gaussian times qamp) at q_pos, for every
 * variant and each of the chunk counts, against one oracle; a second run
 * of each count must repeat its bits */
static void at_check_decode(const at_shape *s, float qamp, int q_pos, const int *chunks,
                            int nchunks)
{
    at_cache c;
    at_cache_init(&c, s);
    const size_t n = (size_t)s->n_head * s->head_dim;
    float *q = at_rand_vec(n, qamp);
    at_ref ref;
    at_ref_make(&ref, &c, q, q_pos, s->n_kv);
    float *out = at_guarded(n), *again = at_guarded(n);
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_attn_kernels *kk = rvl_attn_get_isa(isa);
        if (!kk)
            continue;
        for (int i = 0; i < nchunks; i++) {
            at_decode(kk, &c, q, q_pos, s->n_kv, chunks[i], out);
            const double r = at_ref_check(&ref, out);
            at_note(isa, s->kv_type, r);
            if (r > 1)
                printf("# %s hd=%d heads=%d/%d n_kv=%d pt=%d type=%d chunks=%d window=%d "
                       "cap=%g sinks=%g: error/bound %g\n",
                       kk->name, s->head_dim, s->n_head, s->n_head_kv, s->n_kv, s->page_tokens,
                       s->kv_type, chunks[i], s->window, s->softcap, at_sink_amp, r);
            ATTN_CHECK(r <= 1);
            ATTN_CHECK(at_guard_ok(out, n));
            at_decode(kk, &c, q, q_pos, s->n_kv, chunks[i], again);
            ATTN_CHECK(!memcmp(out, again, n * sizeof *out));
        }
    }
    free(out);
    free(again);
    free(q);
    at_ref_free(&ref);
    at_cache_free(&c);
}

/* prefill of nq tokens after p0 cached ones: the oracle per token, and
 * the bits of one-chunk decode of the same token */
static void at_check_prefill(const at_shape *s0, int p0, int nq, float qamp)
{
    at_shape s = *s0;
    s.n_kv = p0 + nq;
    at_cache c;
    at_cache_init(&c, &s);
    const size_t n = (size_t)s.n_head * s.head_dim, stride = n + 3; /* odd strides */
    float *q = at_rand_vec((size_t)nq * stride, qamp);
    float *out = at_guarded((size_t)nq * stride), *out2 = at_guarded((size_t)nq * stride);
    float *dec = at_guarded(n);
    at_ref *refs = at_alloc((size_t)nq * sizeof *refs);
    for (int i = 0; i < nq; i++)
        at_ref_make(&refs[i], &c, q + (size_t)i * stride, p0 + i, p0 + i + 1);
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_attn_kernels *kk = rvl_attn_get_isa(isa);
        if (!kk)
            continue;
        at_prefill(kk, &c, q, stride, p0, nq, nq, out, stride);
        ATTN_CHECK(at_guard_ok(out, (size_t)nq * stride));
        at_prefill(kk, &c, q, stride, p0, nq, 5, out2, stride); /* other tiles */
        for (int i = 0; i < nq; i++) {
            const float *o = out + (size_t)i * stride;
            const double r = at_ref_check(&refs[i], o);
            at_note(isa, s.kv_type, r);
            if (r > 1)
                printf("# %s prefill hd=%d heads=%d/%d p0=%d nq=%d token %d window=%d "
                       "sinks=%g: error/bound %g\n",
                       kk->name, s.head_dim, s.n_head, s.n_head_kv, p0, nq, i, s.window,
                       at_sink_amp, r);
            ATTN_CHECK(r <= 1);
            at_decode(kk, &c, q + (size_t)i * stride, p0 + i, p0 + i + 1, 1, dec);
            ATTN_CHECK(!memcmp(o, dec, n * sizeof *o));
            ATTN_CHECK(!memcmp(o, out2 + (size_t)i * stride, n * sizeof *o));
        }
    }
    for (int i = 0; i < nq; i++)
        at_ref_free(&refs[i]);
    free(refs);
    free(q);
    free(out);
    free(out2);
    free(dec);
    at_cache_free(&c);
}

#endif
