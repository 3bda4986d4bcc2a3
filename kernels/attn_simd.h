/*
 * attn_simd.h - the body of the SIMD attention kernels (attn.h), compiled
 * once per ISA by kernels/x86/attn_avx2.c, attn_avx512.c and
 * kernels/arm/attn_neon.c. The includer turns its target on and defines:
 *
 *   ATTN_ISA            the name suffix (avx2, ...)
 *   VF, W               the float vector type and its lane count
 *   v_zero() v_set1(x) v_ld(const float *) v_ldh(const uint16_t *: W f16)
 *   v_st(float *, VF) v_fma(a, b, c) = a * b + c (fused) v_mul v_add v_sub
 *   v_max v_abs v_div v_sel_lt(a, b, x, y) = a < b ? x : y per lane
 *   v_copysign(mag, sign) v_exp2i(VF n) = 2^n for integral n in [-126, 127]
 *   v_round(x) (to nearest integer, as a float)
 *   v_hsum(VF) v_hmax(VF) -> float
 *   v_hsum4(a, b, c, d, float out[4]): out[i] = the sum of the lanes of
 *       the i-th argument, with the same order of additions for each
 *
 * Same algorithm as ref (kernels/ref/attn_ref.c): tiles of rows (query
 * token x query head of one kv head) walk 32-key blocks with an online
 * softmax. Per block: each row's dot products, four keys at a time (the
 * K block stays in L1 while every row of the tile reads it); the scores
 * are scaled, soft-capped and exponentiated as 32-lane rows (lanes the
 * row does not see become -inf, exp gives 0); then rows, four at a time,
 * add p * v for each value row of the block, so each value vector loaded
 * serves four rows. Per row the float operations do not depend on which
 * other rows share the tile, which makes prefill and one-chunk decode
 * agree to the bit.
 */

#define ATTN_CAT2(a, b) a##_##b
#define ATTN_CAT(a, b) ATTN_CAT2(a, b)
#define AFN(name) ATTN_CAT(name, ATTN_ISA)
#define ATTN_INLINE static inline __attribute__((always_inline))

/* ======================================================================
 * exp and tanh on vectors
 * ====================================================================== */

/* e^x for x <= 0 (-inf included, gives 0; results below 2^-126 flush to
 * 0): x = n ln2 + r, |r| <= ln2/2, e^r by its Taylor polynomial to r^7
 * (truncation < 2^-27 relative), times 2^n. About 2 ulp. */
ATTN_INLINE VF AFN(v_exp)(VF x)
{
    const VF lo = v_set1(-87.3f);
    const VF xc = v_max(x, lo);
    const VF n = v_round(v_mul(xc, v_set1(1.44269504088896341f)));
    VF r = v_fma(n, v_set1(-0.693145751953125f), xc);   /* ln2 high part: exact n*hi */
    r = v_fma(n, v_set1(-1.42860682030941723e-06f), r);   /* ln2 - hi */
    VF y = v_set1(1.0f / 5040);
    y = v_fma(y, r, v_set1(1.0f / 720));
    y = v_fma(y, r, v_set1(1.0f / 120));
    y = v_fma(y, r, v_set1(1.0f / 24));
    y = v_fma(y, r, v_set1(1.0f / 6));
    y = v_fma(y, r, v_set1(0.5f));
    y = v_fma(y, r, v_set1(1.0f));
    y = v_fma(y, r, v_set1(1.0f));
    y = v_mul(y, v_exp2i(n));
    return v_sel_lt(x, lo, v_zero(), y);
}

/* tanh: its Taylor series to y^13 for |y| < 0.4 (truncation < 2^-27
 * relative), (1 - e) / (1 + e) with e = e^(-2|y|) above (no cancellation:
 * 1 - e > 0.55); the sign of y. inf gives 1, as tanhf. */
ATTN_INLINE VF AFN(v_tanh)(VF y)
{
    const VF a = v_abs(y);
    const VF z = v_mul(a, a);
    VF s = v_set1(21844.0f / 6081075);
    s = v_fma(s, z, v_set1(-1382.0f / 155925));
    s = v_fma(s, z, v_set1(62.0f / 2835));
    s = v_fma(s, z, v_set1(-17.0f / 315));
    s = v_fma(s, z, v_set1(2.0f / 15));
    s = v_fma(s, z, v_set1(-1.0f / 3));
    s = v_fma(v_mul(s, z), a, a);
    const VF e = AFN(v_exp)(v_mul(a, v_set1(-2.0f)));
    const VF big = v_div(v_sub(v_set1(1.0f), e), v_add(v_set1(1.0f), e));
    return v_copysign(v_sel_lt(a, v_set1(0.4f), s, big), y);
}

/* ======================================================================
 * Dot products of one q row with four key rows
 * ====================================================================== */

ATTN_INLINE VF AFN(ldkv)(const void *row, int d, const int f16)
{
    return f16 ? v_ldh((const uint16_t *)row + d) : v_ld((const float *)row + d);
}

ATTN_INLINE float AFN(ldkv1)(const void *row, int d, const int f16)
{
    return f16 ? rvl_f16_to_f32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

/* nr (1..4) q rows at once, sharing each key load (decode: the g query
 * heads of a kv head; prefill: the heads of one token): each row's float
 * operations are dot4's exactly */
ATTN_INLINE void AFN(dot4xn)(int hd, const int nr, const float *const *q, const void *k0,
                             const void *k1, const void *k2, const void *k3, float out[4][4],
                             const int f16)
{
    VF a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        a[r][0] = a[r][1] = a[r][2] = a[r][3] = v_zero();
    int d = 0;
    for (; d + W <= hd; d += W) {
        const VF c0 = AFN(ldkv)(k0, d, f16), c1 = AFN(ldkv)(k1, d, f16);
        const VF c2 = AFN(ldkv)(k2, d, f16), c3 = AFN(ldkv)(k3, d, f16);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const VF x = v_ld(q[r] + d);
            a[r][0] = v_fma(x, c0, a[r][0]);
            a[r][1] = v_fma(x, c1, a[r][1]);
            a[r][2] = v_fma(x, c2, a[r][2]);
            a[r][3] = v_fma(x, c3, a[r][3]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        v_hsum4(a[r][0], a[r][1], a[r][2], a[r][3], out[r]);
    for (; d < hd; d++) {
        const float c0 = AFN(ldkv1)(k0, d, f16), c1 = AFN(ldkv1)(k1, d, f16);
        const float c2 = AFN(ldkv1)(k2, d, f16), c3 = AFN(ldkv1)(k3, d, f16);
        for (int r = 0; r < nr; r++) {
            out[r][0] = fmaf(q[r][d], c0, out[r][0]);
            out[r][1] = fmaf(q[r][d], c1, out[r][1]);
            out[r][2] = fmaf(q[r][d], c2, out[r][2]);
            out[r][3] = fmaf(q[r][d], c3, out[r][3]);
        }
    }
}

/* ======================================================================
 * p . V for up to four rows: acc[r] += sum_t s[r][t - ab] * v_t
 * ====================================================================== */

ATTN_INLINE void AFN(pv_rows)(int hd, const int nr, float *const *acc, const float *const *pr,
                              const char *v0, size_t vstride, int j0, int j1, const int f16)
{
    int d = 0;
    for (; d + 2 * W <= hd; d += 2 * W) {
        VF x[4][2];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            x[r][0] = v_ld(acc[r] + d);
            x[r][1] = v_ld(acc[r] + d + W);
        }
        for (int j = j0; j <= j1; j++) {
            const char *v = v0 + (size_t)j * vstride;
            const VF y0 = AFN(ldkv)(v, d, f16), y1 = AFN(ldkv)(v, d + W, f16);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                const VF b = v_set1(pr[r][j]);
                x[r][0] = v_fma(b, y0, x[r][0]);
                x[r][1] = v_fma(b, y1, x[r][1]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            v_st(acc[r] + d, x[r][0]);
            v_st(acc[r] + d + W, x[r][1]);
        }
    }
    for (; d + W <= hd; d += W) {
        VF x[4];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++)
            x[r] = v_ld(acc[r] + d);
        for (int j = j0; j <= j1; j++) {
            const VF y = AFN(ldkv)(v0 + (size_t)j * vstride, d, f16);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++)
                x[r] = v_fma(v_set1(pr[r][j]), y, x[r]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++)
            v_st(acc[r] + d, x[r]);
    }
    for (; d < hd; d++)
        for (int j = j0; j <= j1; j++) {
            const float y = AFN(ldkv1)(v0 + (size_t)j * vstride, d, f16);
            for (int r = 0; r < nr; r++)
                acc[r][d] = fmaf(pr[r][j], y, acc[r][d]);
        }
}

/* ======================================================================
 * Prefetch: the value pass reads a block column by column (a cache line
 * of every row, then the next line of every row), which the hardware
 * prefetchers follow poorly; the keys and values of the block after the
 * next are requested while this one is computed.
 * ====================================================================== */

ATTN_INLINE void AFN(prefetch_block)(const rvl_attn_params *p, int kh, int t, int tmax,
                                     size_t rs)
{
    if (t > tmax)
        return;
    const int pt = p->page_tokens, ps = t / pt * pt;
    int e = ps + (t - ps) / RVL_ATTN_BLOCK * RVL_ATTN_BLOCK + RVL_ATTN_BLOCK - 1;
    e = e < ps + pt - 1 ? e : ps + pt - 1;
    e = e < tmax ? e : tmax;
    const size_t bytes = (size_t)(e - t + 1) * rs;
    const char *k = (const char *)rvl_attn_row(p, 0, kh, t);
    const char *v = (const char *)rvl_attn_row(p, 1, kh, t);
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(k + o, 0, 2);
        __builtin_prefetch(v + o, 0, 2);
    }
}

/* at the block ending at key be: prefetch the one after the next */
ATTN_INLINE void AFN(prefetch_ahead)(const rvl_attn_params *p, int kh, int be, int tmax,
                                     size_t rs)
{
    const int pt = p->page_tokens;
    int t = be + 1;
    if (t > tmax)
        return;
    const int ps = t / pt * pt;
    int e = ps + (t - ps) / RVL_ATTN_BLOCK * RVL_ATTN_BLOCK + RVL_ATTN_BLOCK - 1;
    e = e < ps + pt - 1 ? e : ps + pt - 1;
    AFN(prefetch_block)(p, kh, e + 1, tmax, rs);
}

/* ======================================================================
 * One tile: rows r see keys [lo[r], hi[r]]; state in w
 * ====================================================================== */

#define ATTN_NS (RVL_ATTN_BLOCK / W)

ATTN_INLINE void AFN(tile)(const rvl_attn_params *p, int kh, int nrows, const int *lo,
                           const int *hi, const rvl_attn_ws *w, const int f16)
{
    const int hd = p->head_dim, pt = p->page_tokens;
    const size_t rs = (size_t)hd * (f16 ? 2 : 4);
    const VF vscale = v_set1(p->scale), ninf = v_set1(-INFINITY);
    const float cap = p->softcap;
    int tmin = lo[0], tmax = hi[0];
    for (int r = 1; r < nrows; r++) {
        tmin = lo[r] < tmin ? lo[r] : tmin;
        tmax = hi[r] > tmax ? hi[r] : tmax;
    }
    AFN(prefetch_block)(p, kh, tmin, tmax, rs);
    for (int b0 = tmin; b0 <= tmax;) {
        /* the aligned block [ab, ab + 32) holding b0, inside one page */
        const int pg = b0 / pt, ps = pg * pt;
        const int ab = ps + (b0 - ps) / RVL_ATTN_BLOCK * RVL_ATTN_BLOCK;
        int be = ab + RVL_ATTN_BLOCK - 1;
        be = be < ps + pt - 1 ? be : ps + pt - 1;
        be = be < tmax ? be : tmax;
        const char *kb = (const char *)rvl_attn_row(p, 0, kh, ab);
        const char *vb = (const char *)rvl_attn_row(p, 1, kh, ab);
        AFN(prefetch_ahead)(p, kh, be, tmax, rs);

        /* the rows with keys in this block, and their dot products: rows
         * with the same keys (the heads of one token) in pairs */
        int act[nrows], nact = 0, ja[nrows], je[nrows];
        for (int r = 0; r < nrows; r++) {
            const int a = lo[r] > b0 ? lo[r] : b0, e = hi[r] < be ? hi[r] : be;
            if (a > e)
                continue;
            act[nact++] = r;
            ja[r] = a - ab;
            je[r] = e - ab;
            float *s = w->s + (size_t)r * RVL_ATTN_BLOCK;
            for (int j = 0; j < RVL_ATTN_BLOCK; j++)
                s[j] = 0;
        }
        for (int i = 0; i < nact;) {
            const int r = act[i], j0 = ja[r], j1 = je[r];
            /* up to 4 rows with the same keys share the key loads */
            int nr = 1;
            while (nr < 4 && i + nr < nact && ja[act[i + nr]] == j0 && je[act[i + nr]] == j1)
                nr++;
            const float *qs[4];
            float *ss[4];
            for (int u = 0; u < nr; u++) {
                qs[u] = w->q + (size_t)act[i + u] * hd;
                ss[u] = w->s + (size_t)act[i + u] * RVL_ATTN_BLOCK;
            }
            for (int j = j0; j <= j1; j += 4) {
                const char *k0 = kb + (size_t)j * rs;
                const char *k1 = j + 1 <= j1 ? k0 + rs : k0;
                const char *k2 = j + 2 <= j1 ? k0 + 2 * rs : k0;
                const char *k3 = j + 3 <= j1 ? k0 + 3 * rs : k0;
                float o[4][4];
                switch (nr) {
                case 4: AFN(dot4xn)(hd, 4, qs, k0, k1, k2, k3, o, f16); break;
                case 3: AFN(dot4xn)(hd, 3, qs, k0, k1, k2, k3, o, f16); break;
                case 2: AFN(dot4xn)(hd, 2, qs, k0, k1, k2, k3, o, f16); break;
                default: AFN(dot4xn)(hd, 1, qs, k0, k1, k2, k3, o, f16); break;
                }
                for (int u = 0; u < 4 && j + u <= j1; u++)
                    for (int v = 0; v < nr; v++)
                        ss[v][j + u] = o[v][u];
            }
            i += nr;
        }

        /* scores -> weights, row by row */
        for (int ia = 0; ia < nact; ia++) {
            const int r = act[ia], j0 = ja[r], j1 = je[r];
            float *s = w->s + (size_t)r * RVL_ATTN_BLOCK;
            VF sv[ATTN_NS];
            for (int i = 0; i < ATTN_NS; i++) {
                sv[i] = v_mul(v_ld(s + i * W), vscale);
                if (cap > 0)
                    sv[i] = v_mul(v_set1(cap), AFN(v_tanh)(v_div(sv[i], v_set1(cap))));
                v_st(s + i * W, sv[i]);
            }
            if (j0 > 0 || j1 < RVL_ATTN_BLOCK - 1) {
                for (int j = 0; j < j0; j++)
                    s[j] = -INFINITY;
                for (int j = j1 + 1; j < RVL_ATTN_BLOCK; j++)
                    s[j] = -INFINITY;
                for (int i = 0; i < ATTN_NS; i++)
                    sv[i] = v_ld(s + i * W);
            }
            VF mv = ninf;
            for (int i = 0; i < ATTN_NS; i++)
                mv = v_max(mv, sv[i]);
            const float mb = v_hmax(mv);
            const float mold = w->m[r], m = mold > mb ? mold : mb;
            const float alpha = expf(mold - m);
            const VF vm = v_set1(m);
            VF ls = v_zero();
            for (int i = 0; i < ATTN_NS; i++) {
                const VF e = AFN(v_exp)(v_sub(sv[i], vm));
                ls = v_add(ls, e);
                v_st(s + i * W, e);
            }
            w->l[r] = w->l[r] * alpha + v_hsum(ls);
            w->m[r] = m;
            if (alpha != 1.0f) {
                float *acc = w->acc + (size_t)r * hd;
                const VF va = v_set1(alpha);
                int d = 0;
                for (; d + W <= hd; d += W)
                    v_st(acc + d, v_mul(v_ld(acc + d), va));
                for (; d < hd; d++)
                    acc[d] *= alpha;
            }
        }

        /* p . V, four rows per pass over the value block */
        for (int i = 0; i < nact; i += 4) {
            const int nr = nact - i < 4 ? nact - i : 4;
            float *acc[4];
            const float *pr[4];
            int j0 = RVL_ATTN_BLOCK, j1 = -1;
            for (int u = 0; u < nr; u++) {
                const int r = act[i + u];
                acc[u] = w->acc + (size_t)r * hd;
                pr[u] = w->s + (size_t)r * RVL_ATTN_BLOCK;
                j0 = ja[r] < j0 ? ja[r] : j0;
                j1 = je[r] > j1 ? je[r] : j1;
            }
            switch (nr) {
            case 4: AFN(pv_rows)(hd, 4, acc, pr, vb, rs, j0, j1, f16); break;
            case 3: AFN(pv_rows)(hd, 3, acc, pr, vb, rs, j0, j1, f16); break;
            case 2: AFN(pv_rows)(hd, 2, acc, pr, vb, rs, j0, j1, f16); break;
            default: AFN(pv_rows)(hd, 1, acc, pr, vb, rs, j0, j1, f16); break;
            }
        }
        b0 = be + 1;
    }
}

static void AFN(tile_f16)(const rvl_attn_params *p, int kh, int nrows, const int *lo,
                          const int *hi, const rvl_attn_ws *w)
{
    AFN(tile)(p, kh, nrows, lo, hi, w, 1);
}

static void AFN(tile_f32)(const rvl_attn_params *p, int kh, int nrows, const int *lo,
                          const int *hi, const rvl_attn_ws *w)
{
    AFN(tile)(p, kh, nrows, lo, hi, w, 0);
}

/* ======================================================================
 * Entry points (same drivers as ref)
 * ====================================================================== */

static void AFN(load_q)(const rvl_attn_params *p, const float *q, float *dst)
{
    if (p->q_f16)
        for (int d = 0; d < p->head_dim; d++)
            dst[d] = rvl_f16_to_f32(rvl_f32_to_f16(q[d]));
    else
        memcpy(dst, q, (size_t)p->head_dim * sizeof(float));
}

static void AFN(reset)(const rvl_attn_params *p, const rvl_attn_ws *w, int nrows)
{
    for (int r = 0; r < nrows; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0;
    }
    memset(w->acc, 0, (size_t)nrows * (size_t)p->head_dim * sizeof(float));
}

static void AFN(run_tile)(const rvl_attn_params *p, int kh, int nrows, const int *lo,
                          const int *hi, const rvl_attn_ws *w)
{
    if (p->kv_type == RVL_ATTN_F16)
        AFN(tile_f16)(p, kh, nrows, lo, hi, w);
    else
        AFN(tile_f32)(p, kh, nrows, lo, hi, w);
}

void ATTN_CAT(rvl_attn_decode_chunk, ATTN_ISA)(const rvl_attn_params *p, const float *q,
                                                int q_pos, int n_kv, int chunk, int n_chunks,
                                                int kvh0, int kvh1, float *partials, void *ws)
{
    const int hd = p->head_dim, g = p->n_head / p->n_head_kv;
    const rvl_attn_ws w = rvl_attn_ws_split(p, ws);
    int lo, hi, c0, c1;
    rvl_attn_key_range(p, q_pos, n_kv, &lo, &hi);
    rvl_attn_chunk_range(p, lo, hi, chunk, n_chunks, &c0, &c1);
    int los[g], his[g];
    for (int r = 0; r < g; r++) {
        los[r] = c0;
        his[r] = c1;
    }
    for (int kh = kvh0; kh < kvh1; kh++) {
        for (int r = 0; r < g; r++)
            AFN(load_q)(p, q + (size_t)(kh * g + r) * hd, w.q + (size_t)r * hd);
        AFN(reset)(p, &w, g);
        if (c0 <= c1)
            AFN(run_tile)(p, kh, g, los, his, &w);
        for (int r = 0; r < g; r++) {
            float *o = partials + ((size_t)chunk * p->n_head + (size_t)(kh * g + r)) * (hd + 2);
            o[0] = w.m[r];
            o[1] = w.l[r];
            memcpy(o + 2, w.acc + (size_t)r * hd, (size_t)hd * sizeof(float));
        }
    }
}

void ATTN_CAT(rvl_attn_prefill, ATTN_ISA)(const rvl_attn_params *p, const float *q,
                                           size_t q_stride, int p0, int nq, int kvh0, int kvh1,
                                           float *out, size_t out_stride, void *ws)
{
    const int hd = p->head_dim, g = p->n_head / p->n_head_kv, tt = rvl_attn_tile_tokens(p);
    const rvl_attn_ws w = rvl_attn_ws_split(p, ws);
    int los[tt * g], his[tt * g];
    for (int kh = kvh0; kh < kvh1; kh++)
        for (int i0 = 0; i0 < nq; i0 += tt) {
            const int nt = nq - i0 < tt ? nq - i0 : tt, nrows = nt * g;
            for (int i = 0; i < nt; i++)
                for (int r = 0; r < g; r++) {
                    const int row = i * g + r, pos = p0 + i0 + i;
                    AFN(load_q)(p, q + (size_t)(i0 + i) * q_stride + (size_t)(kh * g + r) * hd,
                                w.q + (size_t)row * hd);
                    rvl_attn_key_range(p, pos, pos + 1, &los[row], &his[row]);
                }
            AFN(reset)(p, &w, nrows);
            AFN(run_tile)(p, kh, nrows, los, his, &w);
            for (int i = 0; i < nt; i++)
                for (int r = 0; r < g; r++) {
                    const int row = i * g + r;
                    float *o = out + (size_t)(i0 + i) * out_stride + (size_t)(kh * g + r) * hd;
                    const float *a = w.acc + (size_t)row * hd;
                    float inv;
                    const float sa = rvl_attn_norm(p, kh * g + r, w.m[row], w.l[row], &inv);
                    const VF vi = v_set1(inv), vs = v_set1(sa);
                    int d = 0;
                    if (p->sinks) { /* (acc * a) * inv, as the reduce does */
                        for (; d + W <= hd; d += W)
                            v_st(o + d, v_mul(v_mul(v_ld(a + d), vs), vi));
                        for (; d < hd; d++)
                            o[d] = a[d] * sa * inv;
                        continue;
                    }
                    for (; d + W <= hd; d += W)
                        v_st(o + d, v_mul(v_ld(a + d), vi));
                    for (; d < hd; d++)
                        o[d] = a[d] * inv;
                }
        }
}

#undef ATTN_NS
