/*
 * test_kvq_neon.c - the KV page readers on arm64 (kernels/arm/kvq_neon.c)
 * against ref (kernels/ref/kvq_ref.c), on pages of every format encoded
 * from Gaussian rows (a few large channels), head dims 16 .. 256 and 80:
 *  - scores and p . V agree with ref to float rounding: within 2^-18 of a
 *    bound on the sum of the terms' magnitudes (TQ: sqrt(hd) |q| |k_j|
 *    per score and sum_j p_j |v_j| per element, the rotated-domain terms;
 *    otherwise 3 max|x| over the page times sum |q_i| or sum p_j: a Q4
 *    term q m + q d c is at most 3 max|x|);
 *  - one call for nq = 1 .. 6 query heads gives each head exactly what a
 *    call for that head alone gives, and touches no row outside [j0, j1].
 *
 * Built from kernels/ alone (no lib/, no cmocka), statically, by the
 * Makefile's NEON section; tests/cli/t0042-kvq-neon-qemu.sh runs it under
 * qemu-aarch64 on x86 hosts. Prints TAP.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "kvq.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

static int ntests, nfailed, cur_failures;

static void failf(const char *fmt, ...)
{
    if (cur_failures++ < 8) {
        va_list ap;
        va_start(ap, fmt);
        fputs("# ", stdout);
        vprintf(fmt, ap);
        fputc('\n', stdout);
        va_end(ap);
    }
}

static void run(const char *name, void (*fn)(void))
{
    cur_failures = 0;
    fn();
    ntests++;
    if (cur_failures) {
        nfailed++;
        printf("not ok %d - %s (%d failures)\n", ntests, name, cur_failures);
    } else {
        printf("ok %d - %s\n", ntests, name);
    }
    fflush(stdout);
}

static uint64_t rng = 0x853c49e6748fea9bULL;

static double runif(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) * 0x1p-53;
}

static double rnorm(void)
{
    const double u = runif() + 0x1p-60, v = runif();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

enum { NQ = 6, MAXHD = 256 };

typedef struct {
    int fmt, hd;
    unsigned char *kp, *vp;
    float k[32 * MAXHD], v[32 * MAXHD];
    double kmax, vmax;
} page_case;

static void make(page_case *c, int fmt, int hd)
{
    static float x[32 * MAXHD];
    c->fmt = fmt;
    c->hd = hd;
    c->kp = calloc(1, rvl_kvq_page_bytes(fmt, RVL_KVQ_KEY, hd) + 64);
    c->vp = calloc(1, rvl_kvq_page_bytes(fmt, RVL_KVQ_VALUE, hd) + 64);
    if (!c->kp || !c->vp) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < 32 * hd; i++)
            x[i] = (float)(rnorm() * (i % hd == 3 ? 8 : 1));
        unsigned char *pg = kind ? c->vp : c->kp;
        float *d = kind ? c->v : c->k;
        rvl_kvq_encode_page(fmt, kind, hd, x, (size_t)hd, 32, pg);
        rvl_kvq_decode_page(fmt, kind, hd, pg, 32, d, (size_t)hd);
        double m = 0;
        for (int i = 0; i < 32 * hd; i++)
            m = fabs(d[i]) > m ? fabs(d[i]) : m;
        *(kind ? &c->vmax : &c->kmax) = m;
    }
}

static int is_tq(int f)
{
    return f == RVL_KVQ_TQ4 || f == RVL_KVQ_TQ3;
}

static const int hds[] = { 16, 32, 64, 128, 256, 80 };
static const int ranges[][2] = { { 0, 31 }, { 3, 3 }, { 5, 20 }, { 16, 31 }, { 1, 17 } };

static void test_neon_readers_equal_ref(void)
{
    const rvl_kvq_kernels *ref = rvl_kvq_get_isa(RVL_ISA_REF), *nk = rvl_kvq_get_isa(RVL_ISA_NEON);
    if (!nk || !ref) {
        failf("no neon readers");
        return;
    }
    static float q[NQ * MAXHD], p[NQ * 32], s1[NQ * 32], s2[NQ * 32], a1[NQ * MAXHD],
        a2[NQ * MAXHD];
    double worst = 0;
    for (int f = 0; f < RVL_KVQ_COUNT; f++)
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
            const int hd = hds[a];
            if (rvl_kvq_check(f, RVL_KVQ_KEY, hd))
                continue;
            static page_case c;
            make(&c, f, hd);
            for (int i = 0; i < NQ * hd; i++)
                q[i] = (float)rnorm();
            for (int i = 0; i < NQ * 32; i++)
                p[i] = (float)runif();
            for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
                const int j0 = ranges[r][0], j1 = ranges[r][1];
                for (int i = 0; i < NQ * 32; i++)
                    s1[i] = s2[i] = NAN;
                for (int i = 0; i < NQ * hd; i++)
                    a1[i] = a2[i] = 0.125f * (float)(i % 37);
                ref->scores(f, hd, c.kp, j0, j1, q, NQ, s1);
                nk->scores(f, hd, c.kp, j0, j1, q, NQ, s2);
                ref->accum(f, hd, c.vp, j0, j1, p, NQ, a1);
                nk->accum(f, hd, c.vp, j0, j1, p, NQ, a2);
                for (int h = 0; h < NQ; h++) {
                    const float *qh = q + h * hd;
                    double qa = 0, q2 = 0;
                    for (int i = 0; i < hd; i++) {
                        qa += fabs(qh[i]);
                        q2 += (double)qh[i] * qh[i];
                    }
                    for (int j = 0; j < 32; j++) {
                        const int i = h * 32 + j;
                        if (j < j0 || j > j1) {
                            if (!isnan(s2[i]))
                                failf("%s hd %d: score %d of head %d outside [%d, %d] written",
                                      rvl_kvq_name(f), hd, j, h, j0, j1);
                            continue;
                        }
                        double k2 = 0;
                        for (int e = 0; e < hd; e++)
                            k2 += (double)c.k[j * hd + e] * c.k[j * hd + e];
                        const double m = is_tq(f) ? sqrt(hd * q2 * k2) : 3 * c.kmax * qa;
                        const double e = fabs((double)s1[i] - s2[i]) / (0x1p-18 * m + 1e-30);
                        worst = e > worst ? e : worst;
                        if (!(e <= 1))
                            failf("%s hd %d head %d score %d: %.9g vs ref %.9g",
                                  rvl_kvq_name(f), hd, h, j, s2[i], s1[i]);
                    }
                    double pa = 0, pv = 0;
                    for (int j = j0; j <= j1; j++) {
                        double v2 = 0;
                        for (int e = 0; e < hd; e++)
                            v2 += (double)c.v[j * hd + e] * c.v[j * hd + e];
                        pa += p[h * 32 + j];
                        pv += p[h * 32 + j] * sqrt(v2);
                    }
                    for (int e = 0; e < hd; e++) {
                        const int i = h * hd + e;
                        const double m = 0.125 * (i % 37) + (is_tq(f) ? pv : 3 * c.vmax * pa);
                        const double d = fabs((double)a1[i] - a2[i]) / (0x1p-18 * m + 1e-30);
                        worst = d > worst ? d : worst;
                        if (!(d <= 1))
                            failf("%s hd %d head %d acc %d: %.9g vs ref %.9g", rvl_kvq_name(f),
                                  hd, h, e, a2[i], a1[i]);
                    }
                }
            }
            free(c.kp);
            free(c.vp);
        }
    printf("# neon vs ref: worst difference / bound %.3f\n", worst);
}

static void test_neon_several_heads_equal_one_head_at_a_time(void)
{
    const rvl_kvq_kernels *nk = rvl_kvq_get_isa(RVL_ISA_NEON);
    if (!nk) {
        failf("no neon readers");
        return;
    }
    static float q[NQ * MAXHD], p[NQ * 32], s1[NQ * 32], s2[NQ * 32], a1[NQ * MAXHD],
        a2[NQ * MAXHD];
    for (int f = 0; f < RVL_KVQ_COUNT; f++)
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
            const int hd = hds[a];
            if (rvl_kvq_check(f, RVL_KVQ_KEY, hd))
                continue;
            static page_case c;
            make(&c, f, hd);
            for (int i = 0; i < NQ * hd; i++)
                q[i] = (float)rnorm();
            for (int i = 0; i < NQ * 32; i++)
                p[i] = (float)runif();
            for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
                for (int nq = 1; nq <= NQ; nq++) {
                    const int j0 = ranges[r][0], j1 = ranges[r][1];
                    for (int i = 0; i < NQ * 32; i++)
                        s1[i] = s2[i] = NAN;
                    for (int i = 0; i < NQ * hd; i++)
                        a1[i] = a2[i] = 0.125f * (float)(i % 37);
                    nk->scores(f, hd, c.kp, j0, j1, q, nq, s1);
                    nk->accum(f, hd, c.vp, j0, j1, p, nq, a1);
                    for (int h = 0; h < nq; h++) {
                        nk->scores(f, hd, c.kp, j0, j1, q + h * hd, 1, s2 + h * 32);
                        nk->accum(f, hd, c.vp, j0, j1, p + h * 32, 1, a2 + h * hd);
                    }
                    for (int i = 0; i < NQ * 32; i++)
                        if (!(s1[i] == s2[i]) && !(isnan(s1[i]) && isnan(s2[i])))
                            failf("%s hd %d nq %d: score %d %.9g vs %.9g", rvl_kvq_name(f), hd,
                                  nq, i, s1[i], s2[i]);
                    for (int i = 0; i < NQ * hd; i++)
                        if (!(a1[i] == a2[i]))
                            failf("%s hd %d nq %d: acc %d %.9g vs %.9g", rvl_kvq_name(f), hd,
                                  nq, i, a1[i], a2[i]);
                }
            free(c.kp);
            free(c.vp);
        }
}

int main(void)
{
    run("neon readers equal ref to float rounding", test_neon_readers_equal_ref);
    run("neon readers of several heads equal one head at a time",
        test_neon_several_heads_equal_one_head_at_a_time);
    printf("1..%d\n", ntests);
    return nfailed != 0;
}

#else

int main(void)
{
    printf("1..0 # SKIP not an arm64 NEON build\n");
    return 0;
}

#endif
