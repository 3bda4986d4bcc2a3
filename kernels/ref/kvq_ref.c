/*
 * kvq_ref.c - the KV-cache page codecs (kvq.h): formats, the Lloyd-Max
 * codebooks, the Walsh-Hadamard rotation, encode/decode, the scalar page
 * readers, and the table of readers per ISA.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "f16.h"
#include "kvq.h"

/* ======================================================================
 * Formats
 * ====================================================================== */

static const char *const names[RVL_KVQ_COUNT] = { "f16", "q8", "q4", "tq4", "tq3" };

const char *rvl_kvq_name(int fmt)
{
    return fmt >= 0 && fmt < RVL_KVQ_COUNT ? names[fmt] : NULL;
}

int rvl_kvq_parse(const char *name)
{
    for (int i = 0; name && i < RVL_KVQ_COUNT; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

static int is_tq(int fmt)
{
    return fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3;
}

const char *rvl_kvq_check(int fmt, int kind, int head_dim)
{
    static _Thread_local char msg[96];
    if (fmt < 0 || fmt >= RVL_KVQ_COUNT)
        return "unknown kv cache format";
    if (kind != RVL_KVQ_KEY && kind != RVL_KVQ_VALUE)
        return "kind is neither key nor value";
    if (head_dim < 1 || head_dim > RVL_KVQ_MAX_HEAD_DIM)
        return "head_dim out of range (1 .. 1024)";
    if (is_tq(fmt) && (head_dim < 8 || (head_dim & (head_dim - 1)))) {
        snprintf(msg, sizeof msg,
                 "%s needs a power-of-two head_dim (8 .. 1024) for its hadamard rotation, got %d",
                 names[fmt], head_dim);
        return msg;
    }
    return NULL;
}

size_t rvl_kvq_page_bytes(int fmt, int kind, int hd)
{
    const size_t codes = RVL_KVQ_PAGE * rvl_kvq_row_bytes(fmt, hd);
    const size_t ng = (size_t)rvl_kvq_groups(hd);
    switch (fmt) {
    case RVL_KVQ_F16: return codes;
    case RVL_KVQ_Q8: return codes + RVL_KVQ_PAGE * ng * 2;
    case RVL_KVQ_Q4:
        return kind == RVL_KVQ_KEY ? codes + (size_t)hd * 4 : codes + RVL_KVQ_PAGE * ng * 4;
    case RVL_KVQ_TQ4:
    case RVL_KVQ_TQ3: return codes + RVL_KVQ_PAGE * 2;
    default: return 0;
    }
}

double rvl_kvq_token_bytes(int fmt, int kind, int hd)
{
    return (double)rvl_kvq_page_bytes(fmt, kind, hd) / RVL_KVQ_PAGE;
}

/* ======================================================================
 * Lloyd-Max codebooks of N(0, 1) (tests/ref/gen_lloyd_max.py)
 * ====================================================================== */

static const float cb16[16] = {
    -2.732589570995f, -2.069017226531f, -1.618046386022f, -1.256231197347f,
    -0.942340456487f, -0.656759118532f, -0.388048299490f, -0.128395029851f,
    0.128395029851f,  0.388048299490f,  0.656759118532f,  0.942340456487f,
    1.256231197347f,  1.618046386022f,  2.069017226531f,  2.732589570995f,
};
static const float cb8[8] = {
    -2.151945704537f, -1.343909278505f, -0.756005281206f, -0.245094178944f,
    0.245094178944f,  0.756005281206f,  1.343909278505f,  2.151945704537f,
};

const float *rvl_kvq_codebook(int levels)
{
    return levels == 16 ? cb16 : levels == 8 ? cb8 : NULL;
}

double rvl_kvq_codebook_mse(int levels)
{
    return levels == 16 ? 0.009501008 : levels == 8 ? 0.034547761 : 0;
}

/* The index of the nearest centroid: the number of cell boundaries (the
 * midpoints) below v. */
static int nearest(const float *cb, int levels, float v)
{
    int k = 0;
    for (int i = 0; i + 1 < levels; i++)
        k += v > 0.5f * (cb[i] + cb[i + 1]);
    return k;
}

/* ======================================================================
 * Rotation
 * ====================================================================== */

float rvl_kvq_sign(int i)
{
    uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (z & 1) ? 1.0f : -1.0f;
}

void rvl_kvq_fwht(float *x, int n)
{
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++)
        x[i] *= s;
}

void rvl_kvq_rotate(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] *= rvl_kvq_sign(i);
    rvl_kvq_fwht(x, n);
}

void rvl_kvq_unrotate(float *x, int n)
{
    rvl_kvq_fwht(x, n);
    for (int i = 0; i < n; i++)
        x[i] *= rvl_kvq_sign(i);
}

/* ======================================================================
 * Code packing
 * ====================================================================== */

static inline int get4(const uint8_t *row, int i)
{
    return (row[i >> 1] >> ((i & 1) * 4)) & 15;
}

static inline void put4(uint8_t *row, int i, int c)
{
    uint8_t *b = row + (i >> 1);
    *b = (uint8_t)((i & 1) ? ((*b & 0x0f) | (c << 4)) : ((*b & 0xf0) | c));
}

static inline int get3(const uint8_t *row, int i)
{
    const uint8_t *b = row + (i >> 3) * 3;
    const uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
    return (int)(w >> ((i & 7) * 3)) & 7;
}

static inline void put3(uint8_t *row, int i, int c)
{
    uint8_t *b = row + (i >> 3) * 3;
    uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
    const int sh = (i & 7) * 3;
    w = (w & ~(7u << sh)) | ((uint32_t)c << sh);
    b[0] = (uint8_t)w;
    b[1] = (uint8_t)(w >> 8);
    b[2] = (uint8_t)(w >> 16);
}

/* f16 of a non-negative scale, saturating at the f16 maximum */
static inline uint16_t f16_sat(float x)
{
    return rvl_f32_to_f16(x < 65504.0f ? x : 65504.0f);
}

static inline uint8_t *row_of(int fmt, int hd, void *page, int j)
{
    return (uint8_t *)page + (size_t)j * rvl_kvq_row_bytes(fmt, hd);
}

/* ======================================================================
 * Encode
 * ====================================================================== */

static void enc_q8(int hd, const float *x, int j, void *page)
{
    int8_t *c = (int8_t *)row_of(RVL_KVQ_Q8, hd, page, j);
    const int ng = rvl_kvq_groups(hd);
    uint16_t *sd = (uint16_t *)rvl_kvq_side(RVL_KVQ_Q8, hd, page) + (size_t)j * ng;
    for (int g = 0; g < ng; g++) {
        const int a = g * RVL_KVQ_GROUP, e = a + RVL_KVQ_GROUP < hd ? a + RVL_KVQ_GROUP : hd;
        float amax = 0;
        for (int i = a; i < e; i++)
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        sd[g] = f16_sat(amax / 127);
        const float d = rvl_f16_to_f32(sd[g]), id = d > 0 ? 1.0f / d : 0.0f;
        for (int i = a; i < e; i++) {
            float v = roundf(x[i] * id);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            c[i] = (int8_t)v;
        }
    }
}

/* asymmetric 4-bit of x[i * step], i < n, with the range [lo, hi] */
static void q4_range(const float *x, int n, size_t step, float *lo, float *hi)
{
    float a = x[0], b = x[0];
    for (int i = 1; i < n; i++) {
        const float v = x[(size_t)i * step];
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    *lo = a;
    *hi = b;
}

static inline int q4_code(float v, float m, float id)
{
    float c = roundf((v - m) * id);
    c = c > 15 ? 15 : c < 0 ? 0 : c;
    return (int)c;
}

static void enc_q4v(int hd, const float *x, int j, void *page)
{
    uint8_t *c = row_of(RVL_KVQ_Q4, hd, page, j);
    const int ng = rvl_kvq_groups(hd);
    uint16_t *sd = (uint16_t *)rvl_kvq_side(RVL_KVQ_Q4, hd, page) + (size_t)j * ng * 2;
    for (int g = 0; g < ng; g++) {
        const int a = g * RVL_KVQ_GROUP, e = a + RVL_KVQ_GROUP < hd ? a + RVL_KVQ_GROUP : hd;
        float lo, hi;
        q4_range(x + a, e - a, 1, &lo, &hi);
        sd[2 * g] = f16_sat((hi - lo) / 15);
        sd[2 * g + 1] = rvl_f32_to_f16(lo);
        const float d = rvl_f16_to_f32(sd[2 * g]), m = rvl_f16_to_f32(sd[2 * g + 1]);
        const float id = d > 0 ? 1.0f / d : 0.0f;
        for (int i = a; i < e; i++)
            put4(c, i, q4_code(x[i], m, id));
    }
}

static void enc_q4k_page(int hd, const float *x, size_t xs, int n, void *page)
{
    uint16_t *sd = (uint16_t *)rvl_kvq_side(RVL_KVQ_Q4, hd, page);
    for (int ch = 0; ch < hd; ch++) {
        float lo, hi;
        q4_range(x + ch, n, xs, &lo, &hi);
        sd[ch] = f16_sat((hi - lo) / 15);
        sd[hd + ch] = rvl_f32_to_f16(lo);
        const float d = rvl_f16_to_f32(sd[ch]), m = rvl_f16_to_f32(sd[hd + ch]);
        const float id = d > 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < n; j++)
            put4(row_of(RVL_KVQ_Q4, hd, page, j), ch, q4_code(x[(size_t)j * xs + ch], m, id));
    }
}

/* a key row quantized with the page's current per-channel ranges */
static void enc_q4k_row(int hd, const float *x, int j, void *page)
{
    const uint16_t *sd = rvl_kvq_side(RVL_KVQ_Q4, hd, page);
    uint8_t *c = row_of(RVL_KVQ_Q4, hd, page, j);
    for (int ch = 0; ch < hd; ch++) {
        const float d = rvl_f16_to_f32(sd[ch]), m = rvl_f16_to_f32(sd[hd + ch]);
        put4(c, ch, q4_code(x[ch], m, d > 0 ? 1.0f / d : 0.0f));
    }
}

static void enc_tq(int fmt, int hd, const float *x, int j, void *page)
{
    const int levels = fmt == RVL_KVQ_TQ4 ? 16 : 8;
    const float *cb = rvl_kvq_codebook(levels);
    uint8_t *c = row_of(fmt, hd, page, j);
    uint16_t *sd = (uint16_t *)rvl_kvq_side(fmt, hd, page);
    float u[RVL_KVQ_MAX_HEAD_DIM];
    double n2 = 0;
    for (int i = 0; i < hd; i++) {
        n2 += (double)x[i] * x[i];
        u[i] = x[i];
    }
    const float norm = (float)sqrt(n2);
    if (!(norm > 0)) {
        memset(c, 0, rvl_kvq_row_bytes(fmt, hd));
        sd[j] = 0;
        return;
    }
    rvl_kvq_rotate(u, hd);
    const float sc = sqrtf((float)hd) / norm;
    double c2 = 0;
    for (int i = 0; i < hd; i++) {
        const int k = nearest(cb, levels, u[i] * sc);
        c2 += (double)cb[k] * cb[k];
        if (levels == 16)
            put4(c, i, k);
        else
            put3(c, i, k);
    }
    sd[j] = f16_sat((float)(norm / sqrt(c2)));
}

void rvl_kvq_encode_row(int fmt, int kind, int hd, const float *x, int j, void *page)
{
    switch (fmt) {
    case RVL_KVQ_F16: {
        uint16_t *r = (uint16_t *)row_of(fmt, hd, page, j);
        for (int i = 0; i < hd; i++)
            r[i] = rvl_f32_to_f16(x[i]);
        break;
    }
    case RVL_KVQ_Q8: enc_q8(hd, x, j, page); break;
    case RVL_KVQ_Q4:
        if (kind == RVL_KVQ_VALUE)
            enc_q4v(hd, x, j, page);
        else
            enc_q4k_row(hd, x, j, page);
        break;
    default: enc_tq(fmt, hd, x, j, page); break;
    }
}

void rvl_kvq_encode_page(int fmt, int kind, int hd, const float *x, size_t xs, int n, void *page)
{
    memset(page, 0, rvl_kvq_page_bytes(fmt, kind, hd));
    if (fmt == RVL_KVQ_Q4 && kind == RVL_KVQ_KEY) {
        enc_q4k_page(hd, x, xs, n, page);
        return;
    }
    for (int j = 0; j < n; j++)
        rvl_kvq_encode_row(fmt, kind, hd, x + (size_t)j * xs, j, page);
}

/* ======================================================================
 * Decode
 * ====================================================================== */

void rvl_kvq_decode_page(int fmt, int kind, int hd, const void *page, int n, float *x,
                         size_t xs)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const int ng = rvl_kvq_groups(hd);
    for (int j = 0; j < n; j++) {
        const uint8_t *r = (const uint8_t *)page + (size_t)j * rvl_kvq_row_bytes(fmt, hd);
        float *y = x + (size_t)j * xs;
        switch (fmt) {
        case RVL_KVQ_F16:
            for (int i = 0; i < hd; i++)
                y[i] = rvl_f16_to_f32(((const uint16_t *)r)[i]);
            break;
        case RVL_KVQ_Q8:
            for (int i = 0; i < hd; i++)
                y[i] = rvl_f16_to_f32(sd[(size_t)j * ng + i / RVL_KVQ_GROUP]) *
                       (float)((const int8_t *)r)[i];
            break;
        case RVL_KVQ_Q4:
            for (int i = 0; i < hd; i++) {
                float d, m;
                if (kind == RVL_KVQ_KEY) {
                    d = rvl_f16_to_f32(sd[i]);
                    m = rvl_f16_to_f32(sd[hd + i]);
                } else {
                    const uint16_t *g = sd + ((size_t)j * ng + i / RVL_KVQ_GROUP) * 2;
                    d = rvl_f16_to_f32(g[0]);
                    m = rvl_f16_to_f32(g[1]);
                }
                y[i] = fmaf(d, (float)get4(r, i), m);
            }
            break;
        default: {
            const float *cb = rvl_kvq_codebook(fmt == RVL_KVQ_TQ4 ? 16 : 8);
            const float g = rvl_f16_to_f32(sd[j]);
            for (int i = 0; i < hd; i++)
                y[i] = g * cb[fmt == RVL_KVQ_TQ4 ? get4(r, i) : get3(r, i)];
            rvl_kvq_unrotate(y, hd);
            break;
        }
        }
    }
}

/* ======================================================================
 * Page readers, scalar
 * ====================================================================== */

static void scores1(int fmt, int hd, const void *page, int j0, int j1, const float *q,
                        float *s)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const int ng = rvl_kvq_groups(hd);
    if (fmt == RVL_KVQ_Q4) {
        /* q . (m + d c) = sum q m + sum (q d) c: per key, a lookup and FMA */
        float qd[RVL_KVQ_MAX_HEAD_DIM], base = 0;
        for (int i = 0; i < hd; i++) {
            qd[i] = q[i] * rvl_f16_to_f32(sd[i]);
            base = fmaf(q[i], rvl_f16_to_f32(sd[hd + i]), base);
        }
        for (int j = j0; j <= j1; j++) {
            const uint8_t *r = (const uint8_t *)page + (size_t)j * rb;
            float a = 0;
            for (int i = 0; i < hd; i++)
                a = fmaf(qd[i], (float)get4(r, i), a);
            s[j] = base + a;
        }
        return;
    }
    for (int j = j0; j <= j1; j++) {
        const uint8_t *r = (const uint8_t *)page + (size_t)j * rb;
        float a = 0;
        switch (fmt) {
        case RVL_KVQ_F16:
            for (int i = 0; i < hd; i++)
                a = fmaf(q[i], rvl_f16_to_f32(((const uint16_t *)r)[i]), a);
            break;
        case RVL_KVQ_Q8:
            for (int g = 0; g < ng; g++) {
                const int b = g * RVL_KVQ_GROUP, e = b + RVL_KVQ_GROUP < hd ? b + RVL_KVQ_GROUP : hd;
                float t = 0;
                for (int i = b; i < e; i++)
                    t = fmaf(q[i], (float)((const int8_t *)r)[i], t);
                a = fmaf(rvl_f16_to_f32(sd[(size_t)j * ng + g]), t, a);
            }
            break;
        case RVL_KVQ_TQ4:
            for (int i = 0; i < hd; i++)
                a = fmaf(q[i], cb16[get4(r, i)], a);
            a *= rvl_f16_to_f32(sd[j]);
            break;
        default:
            for (int i = 0; i < hd; i++)
                a = fmaf(q[i], cb8[get3(r, i)], a);
            a *= rvl_f16_to_f32(sd[j]);
            break;
        }
        s[j] = a;
    }
}

static void accum1(int fmt, int hd, const void *page, int j0, int j1, const float *p,
                       float *acc)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const int ng = rvl_kvq_groups(hd);
    for (int j = j0; j <= j1; j++) {
        const uint8_t *r = (const uint8_t *)page + (size_t)j * rb;
        const float w = p[j];
        switch (fmt) {
        case RVL_KVQ_F16:
            for (int i = 0; i < hd; i++)
                acc[i] = fmaf(w, rvl_f16_to_f32(((const uint16_t *)r)[i]), acc[i]);
            break;
        case RVL_KVQ_Q8:
            for (int i = 0; i < hd; i++) {
                const float wd = w * rvl_f16_to_f32(sd[(size_t)j * ng + i / RVL_KVQ_GROUP]);
                acc[i] = fmaf(wd, (float)((const int8_t *)r)[i], acc[i]);
            }
            break;
        case RVL_KVQ_Q4:
            for (int i = 0; i < hd; i++) {
                const uint16_t *g = sd + ((size_t)j * ng + i / RVL_KVQ_GROUP) * 2;
                const float wd = w * rvl_f16_to_f32(g[0]), wm = w * rvl_f16_to_f32(g[1]);
                acc[i] = fmaf(wd, (float)get4(r, i), acc[i] + wm);
            }
            break;
        case RVL_KVQ_TQ4: {
            const float wg = w * rvl_f16_to_f32(sd[j]);
            for (int i = 0; i < hd; i++)
                acc[i] = fmaf(wg, cb16[get4(r, i)], acc[i]);
            break;
        }
        default: {
            const float wg = w * rvl_f16_to_f32(sd[j]);
            for (int i = 0; i < hd; i++)
                acc[i] = fmaf(wg, cb8[get3(r, i)], acc[i]);
            break;
        }
        }
    }
}

/* the query heads one at a time */
void rvl_kvq_scores_ref(int fmt, int hd, const void *page, int j0, int j1, const float *q, int nq,
                      float *s)
{
    for (int h = 0; h < nq; h++)
        scores1(fmt, hd, page, j0, j1, q + (size_t)h * hd, s + (size_t)h * RVL_KVQ_PAGE);
}

void rvl_kvq_accum_ref(int fmt, int hd, const void *page, int j0, int j1, const float *p, int nq,
                     float *acc)
{
    for (int h = 0; h < nq; h++)
        accum1(fmt, hd, page, j0, j1, p + (size_t)h * RVL_KVQ_PAGE, acc + (size_t)h * hd);
}

/* ======================================================================
 * Readers per ISA
 * ====================================================================== */

static const rvl_kvq_kernels variants[RVL_ISA_COUNT] = {
    [RVL_ISA_REF] = { "ref", rvl_kvq_scores_ref, rvl_kvq_accum_ref },
#if defined(__x86_64__) || defined(__i386__)
    [RVL_ISA_AVX2] = { "avx2", rvl_kvq_scores_avx2, rvl_kvq_accum_avx2 },
    [RVL_ISA_AVX512] = { "avx512", rvl_kvq_scores_avx512, rvl_kvq_accum_avx512 },
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
    [RVL_ISA_NEON] = { "neon", rvl_kvq_scores_neon, rvl_kvq_accum_neon },
#endif
};

const rvl_kvq_kernels *rvl_kvq_get_isa(int isa)
{
    if (isa < 0 || isa >= RVL_ISA_COUNT || !variants[isa].name || !rvl_dispatch_isa_runnable(isa))
        return NULL;
    return &variants[isa];
}

const rvl_kvq_kernels *rvl_kvq_get(void)
{
    const rvl_kvq_kernels *k = rvl_kvq_get_isa(rvl_dispatch_isa());
    return k ? k : &variants[RVL_ISA_REF];
}
