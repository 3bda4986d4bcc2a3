/*
 * mtl_testutil.h - helpers of the Metal kernel tests (test_matmul,
 * test_norm, test_rope, test_attn, test_kv): random data, the kernels/
 * headers in C++, the host-side RoPE of lib/engine/forward.c, and worst-error
 * bookkeeping (printed with METAL_TEST_VERBOSE=1).
 *
 * The oracles are kernels/ref (dequantize, attention, KV page codecs) and
 * double-precision loops written here; each test states its tolerance.
 */
#ifndef RVL_MTL_TESTUTIL_H
#define RVL_MTL_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
extern "C" {
#include <cmocka.h>
}

#include <vector>

extern "C" {
#include "dispatch.h"
#include "f16.h"
#include "formats.h"
#include "kvq.h"
}

/* kernels/attn.h is not valid C++ (rvl_attn_row converts const void * to
 * const char * implicitly), so the attention tests declare what they use
 * of it here, with the same layout. Keep in step with kernels/attn.h;
 * include it instead once it compiles as C++. */
#define RVL_ATTN_F32 0
#define RVL_ATTN_F16 1
typedef struct {
    int head_dim;
    int n_head, n_head_kv;
    float scale;
    float softcap;
    int window;
    int q_f16;
    int kv_type;
    int page_tokens;
    const void *k, *v;
    size_t page_stride;
    size_t head_stride;
    const int32_t *page_table;
    const float *sinks;
} rvl_attn_params;
static_assert(sizeof(rvl_attn_params) == 88, "kernels/attn.h's rvl_attn_params changed");
typedef struct {
    const char *name;
    void (*decode_chunk)(const rvl_attn_params *p, const float *q, int q_pos, int n_kv, int chunk,
                         int n_chunks, int kvh0, int kvh1, float *partials, void *ws);
    void (*prefill)(const rvl_attn_params *p, const float *q, size_t q_stride, int p0, int nq,
                    int kvh0, int kvh1, float *out, size_t out_stride, void *ws);
} rvl_attn_kernels;
extern "C" {
const rvl_attn_kernels *rvl_attn_get_isa(int isa);
size_t rvl_attn_ws_size(const rvl_attn_params *p);
size_t rvl_attn_partials_size(const rvl_attn_params *p, int n_chunks);
void rvl_attn_decode_reduce(const rvl_attn_params *p, int n_chunks, const float *partials, int h0,
                            int h1, float *out);
void rvl_attn_prefill_ref(const rvl_attn_params *p, const float *q, size_t q_stride, int p0,
                          int nq, int kvh0, int kvh1, float *out, size_t out_stride, void *ws);
}
#include "../../metal/rvl_metal_args.h"
#include "emu.h"

/* ---- random numbers (splitmix64) ---- */
static uint64_t mt_rng = 0x243F6A8885A308D3ull;

static inline uint64_t mt_u64(void)
{
    uint64_t z = (mt_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double mt_unif(void) /* (0, 1) */
{
    return ((double)(mt_u64() >> 11) + 0.5) / 9007199254740992.0;
}

static inline float mt_gauss(void)
{
    return (float)(sqrt(-2 * log(mt_unif())) * cos(6.283185307179586 * mt_unif()));
}

static inline std::vector<float> mt_gauss_vec(size_t n, float amp = 1.0f)
{
    std::vector<float> v(n);
    for (auto &x : v)
        x = mt_gauss() * amp;
    return v;
}

/* A random permutation of 0 .. n-1. */
static inline std::vector<int32_t> mt_perm(int n)
{
    std::vector<int32_t> p((size_t)n);
    for (int i = 0; i < n; i++)
        p[(size_t)i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(mt_u64() % (uint64_t)(i + 1));
        const int32_t t = p[(size_t)i];
        p[(size_t)i] = p[(size_t)j];
        p[(size_t)j] = t;
    }
    return p;
}

/* ---- dispatch with the sizes of rvl_metal_args.h ---- */
static inline int mt_dispatch(emu::Encoder &e, const rvl_mtl_dispatch &d)
{
    const int rc = e.dispatch_threadgroups(emu::size3(d.grid[0], d.grid[1], d.grid[2]),
                                           emu::size3(d.threads[0], d.threads[1], d.threads[2]));
    if (rc != 0)
        fprintf(stderr, "metal-emu: %s\n", emu::last_error());
    return rc;
}

/* ---- the worst error / tolerance ratio of a test, for the log ---- */
struct mt_worst {
    const char *what;
    double ratio = 0;
    explicit mt_worst(const char *w) : what(w) {}
    /* records err / tol; true when within */
    bool check(double err, double tol)
    {
        const double r = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (r > ratio || r != r)
            ratio = r;
        return err <= tol;
    }
    ~mt_worst()
    {
        if (getenv("METAL_TEST_VERBOSE"))
            fprintf(stderr, "# %s: worst error / tolerance = %.3g\n", what, ratio);
    }
};

/* ---- host-side RoPE (lib/engine/forward.c's rope()) and tables ---- */

/* Angle tables as lib/engine/rope.c lays them out (pos x rope_dim/2), built here
 * from plain frequencies: the kernels take any table. */
static inline void mt_rope_tables(int n_pos, int rope_dim, float base, std::vector<float> &cs,
                                  std::vector<float> &sn)
{
    const int half = rope_dim / 2;
    cs.assign((size_t)n_pos * half, 0);
    sn.assign((size_t)n_pos * half, 0);
    for (int p = 0; p < n_pos; p++)
        for (int i = 0; i < half; i++) {
            const double th = p * pow((double)base, -2.0 * i / rope_dim);
            cs[(size_t)p * half + i] = (float)cos(th);
            sn[(size_t)p * half + i] = (float)sin(th);
        }
}

/* Rotate one head in place (mode RVL_MTL_ROPE_*), float ops of forward.c. */
static inline void mt_rope_head(float *x, int mode, int rope_dim, const float *cs, const float *sn)
{
    if (mode == RVL_MTL_ROPE_NONE)
        return;
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        const int a = mode == RVL_MTL_ROPE_NEOX ? i : 2 * i;
        const int b = mode == RVL_MTL_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * cs[i] - x1 * sn[i];
        x[b] = x0 * sn[i] + x1 * cs[i];
    }
}

static inline bool mt_verbose(void)
{
    return getenv("METAL_TEST_VERBOSE") != NULL;
}

#endif
