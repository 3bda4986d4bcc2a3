/*
 * bench.c - the measuring behind `ruvllm bench`.
 *
 * Everything that loops for time lives here, so that cmd/bench.c only
 * chooses what to measure and prints it:
 *
 *   - the machine: memory bandwidth (STREAM-style copy, triad and read over
 *     arrays larger than the last-level cache) and a peak FLOP/s per ISA
 *     from a register-only FMA loop;
 *   - kernels: GEMV/GEMM on a weight format with a given ISA's kernels,
 *     through the forward pass's own matmul (engine/matmul.h) over a
 *     weight whose rows are cycled through a working set larger than the
 *     last-level cache; quantize, dequantize; RMSNorm, RoPE and softmax
 *     (kernels/rowops.h's scalar kernels);
 *   - models: a timed decode of random tokens from an empty cache, and
 *     synthetic llama GGUFs of random weights of a named shape
 *
 * Perplexity and the KL-divergence base file are in bench_ppl.c.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "dispatch.h"
#include "engine/matmul.h"
#include "format/format_int.h"
#include "formats.h"
#include "rowops.h"
#include "ruvllm_tools.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define BENCH_ARM 1
#endif

/* ====================================================================
 * Time, statistics, random numbers
 * ==================================================================== */

double rvl_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void rvl_bench_stats(const double *x, int n, rvl_bench_stat *s)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    if (n <= 0)
        return;
    double sum = 0, tmp[64], *v = n <= 64 ? tmp : malloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++)
        sum += x[i];
    s->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (x[i] - s->mean) * (x[i] - s->mean);
    s->sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
    s->min = s->max = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < s->min)
            s->min = x[i];
        if (x[i] > s->max)
            s->max = x[i];
    }
    if (!v) { /* no memory for the sort: the mean stands in for the median */
        s->median = s->mean;
        return;
    }
    memcpy(v, x, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    s->median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    if (v != tmp)
        free(v);
}

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Roughly normal with standard deviation sd (sum of four uniforms). */
static float rng_normal(uint64_t *s, float sd)
{
    float u = 0;
    for (int i = 0; i < 4; i++)
        u += (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);
    return (u - 2.0f) * 1.7320508f * sd;
}

static void *alloc_aligned(size_t n)
{
    void *p = NULL;
    if (n == 0)
        n = 64;
    if (posix_memalign(&p, 64, (n + 63) & ~(size_t)63) != 0)
        return NULL;
    return p;
}

/* The big buffers (the bandwidth arrays, the ring of weights): with
 * huge pages asked for, 2 MiB-aligned and MADV_HUGEPAGE; otherwise as
 * malloc gives them (4 KiB pages where transparent huge pages are
 * 'madvise', the default of Debian and others). A model's weights are
 * a file mapping, which recent kernels map with 2 MiB entries where the
 * page cache holds large folios (Linux 6.18 on ext4: 598 of the 632 MiB
 * of a Llama-1B Q4_0 file after a cache drop, without being asked).
 * The pages decide the roof: on the 2-core VM of the README a read pass
 * over 480 MiB ran at 25-26 GB/s with 4 KiB pages, 34-36 GB/s with
 * 2 MiB ones (TLB misses). */
static void *big_alloc(bool huge, size_t n)
{
    if (!huge)
        return alloc_aligned(n);
    void *p = NULL;
    const size_t align = (size_t)2 << 20;
    n = (n + align - 1) / align * align;
    if (posix_memalign(&p, align, n) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

static void split_rows(uint64_t n, int ith, int nth, uint64_t *r0, uint64_t *r1)
{
    uint64_t per = (n + (uint64_t)nth - 1) / (uint64_t)nth;
    *r0 = per * (uint64_t)ith;
    if (*r0 > n)
        *r0 = n;
    *r1 = *r0 + per < n ? *r0 + per : n;
}

/* ====================================================================
 * The machine: last-level cache, memory bandwidth, peak FLOP/s
 * ==================================================================== */

uint64_t rvl_bench_llc_bytes(void)
{
    uint64_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            unsigned long long v = strtoull(buf, &end, 10);
            if (*end == 'K')
                v <<= 10;
            else if (*end == 'M')
                v <<= 20;
            else if (*end == 'G')
                v <<= 30;
            if (v > best)
                best = v;
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (!best) {
        long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (v > 0)
            best = (uint64_t)v;
    }
#endif
    return best;
}

/* Default working set: twice the LLC (32 MiB assumed when unknown),
 * clamped to [256 MiB, 1 GiB]. */
static uint64_t default_ws(void)
{
    uint64_t llc = rvl_bench_llc_bytes();
    uint64_t ws = 2 * (llc ? llc : 32ull << 20);
    if (ws < 256ull << 20)
        ws = 256ull << 20;
    if (ws > 1ull << 30)
        ws = 1ull << 30;
    return ws;
}

/* Where matrices of one fill come from: a ring over `arena` written in
 * order once by the fill, then read in the same order, so that the bytes
 * at the cursor are always the least recently touched ones. */
struct rvl_bench {
    rvl_pool *pool;
    uint64_t ws;              /* requested working set */
    char *arena;
    uint64_t arena_bytes;
    uint64_t cursor;
    uint32_t fill_type;       /* what the arena holds (UINT32_MAX: nothing) */
    uint64_t fill_k;          /* row length for formats with a row header */
    uint64_t fill_pack_k;     /* packed in groups of 16 rows of this length (0: rows) */
    uint64_t fill_unit;       /* bytes of a block (or a row with a header) */
    uint64_t fill_bytes;      /* whole units written: the ring's end */
    bool huge;                /* the big buffers ask for 2 MiB pages */
};

int rvl_bench_open(rvl_bench **out, int n_threads, uint64_t ws_bytes)
{
    rvl_bench *b = calloc(1, sizeof *b);
    int rc;

    *out = NULL;
    if (!b)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = rvl_pool_open(&b->pool, n_threads)) < 0) {
        free(b);
        return rc;
    }
    b->ws = ws_bytes ? ws_bytes : default_ws();
    b->fill_type = UINT32_MAX;
    *out = b;
    return 0;
}

void rvl_bench_close(rvl_bench *b)
{
    if (!b)
        return;
    rvl_pool_close(b->pool);
    free(b->arena);
    free(b);
}

void rvl_bench_set_huge_pages(rvl_bench *b, bool on) { b->huge = on; }

/* AnonHugePages of /proc/self/smaps_rollup: how much of the process's
 * anonymous memory the kernel gave 2 MiB pages (0 where unknown). */
uint64_t rvl_bench_huge_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb << 10;
}

int rvl_bench_n_threads(const rvl_bench *b) { return rvl_pool_size(b->pool); }
uint64_t rvl_bench_ws_bytes(const rvl_bench *b) { return b->ws; }

/* --- STREAM-style bandwidth --------------------------------------- */

typedef struct {
    double *a, *b, *c;
    uint64_t n;
    int op;                   /* 0 init, 1 copy, 2 triad, 3 read */
    bool wide;                /* read with AVX2 loads (the CPU has them) */
    uint64_t sink[256];
} stream_job;

/* The read test is the roof a read-only kernel (a GEMV) is compared
 * with, so it must be limited by memory alone: wide loads, eight
 * independent accumulators (no add latency chain), and a software
 * prefetch ahead of the stream as the kernels do (kernels/x86/common.h).
 * Integer adds on the bits: no FP latency, no denormal stalls. */
static uint64_t read_sum_scalar(const uint64_t *u, uint64_t i0, uint64_t i1)
{
    uint64_t s[8] = {0}, i = i0;
    for (; i + 8 <= i1; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += u[i + k];
    for (; i < i1; i++)
        s[0] += u[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

#ifdef BENCH_X86
#define READ_AHEAD 2048 /* bytes, as RVL_PREFETCH_AHEAD */
__attribute__((target("avx2"))) static uint64_t read_sum_avx2(const uint64_t *u, uint64_t i0,
                                                               uint64_t i1)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    __m256i s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    uint64_t i = i0;
    /* 256 bytes (four cache lines) per iteration */
    for (; i + 32 <= i1; i += 32) {
        const char *p = (const char *)(u + i);
        _mm_prefetch(p + READ_AHEAD, _MM_HINT_T0);
        _mm_prefetch(p + READ_AHEAD + 64, _MM_HINT_T0);
        _mm_prefetch(p + READ_AHEAD + 128, _MM_HINT_T0);
        _mm_prefetch(p + READ_AHEAD + 192, _MM_HINT_T0);
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)p));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + 96)));
        s4 = _mm256_add_epi64(s4, _mm256_loadu_si256((const __m256i *)(p + 128)));
        s5 = _mm256_add_epi64(s5, _mm256_loadu_si256((const __m256i *)(p + 160)));
        s6 = _mm256_add_epi64(s6, _mm256_loadu_si256((const __m256i *)(p + 192)));
        s7 = _mm256_add_epi64(s7, _mm256_loadu_si256((const __m256i *)(p + 224)));
    }
    const __m256i t = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)),
                                       _mm256_add_epi64(_mm256_add_epi64(s4, s5), _mm256_add_epi64(s6, s7)));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, t);
    return l[0] + l[1] + l[2] + l[3] + read_sum_scalar(u, i, i1);
}
#endif

#ifdef BENCH_ARM
static uint64_t read_sum_neon(const uint64_t *u, uint64_t i0, uint64_t i1)
{
    uint64x2_t s0 = vdupq_n_u64(0), s1 = s0, s2 = s0, s3 = s0;
    uint64_t i = i0;
    /* 64 bytes (a cache line on most cores) per iteration */
    for (; i + 8 <= i1; i += 8) {
        __builtin_prefetch((const char *)(u + i) + 2048);
        s0 = vaddq_u64(s0, vld1q_u64(u + i));
        s1 = vaddq_u64(s1, vld1q_u64(u + i + 2));
        s2 = vaddq_u64(s2, vld1q_u64(u + i + 4));
        s3 = vaddq_u64(s3, vld1q_u64(u + i + 6));
    }
    return vaddvq_u64(vaddq_u64(vaddq_u64(s0, s1), vaddq_u64(s2, s3))) + read_sum_scalar(u, i, i1);
}
#endif

static void stream_run(void *arg, int ith, int nth)
{
    stream_job *j = arg;
    uint64_t i0, i1;
    split_rows(j->n, ith, nth, &i0, &i1);
    double *a = j->a, *b = j->b, *c = j->c;
    switch (j->op) {
    case 0:
        for (uint64_t i = i0; i < i1; i++) {
            a[i] = 1.0;
            b[i] = 2.0;
            c[i] = 0.5;
        }
        break;
    case 1:
        for (uint64_t i = i0; i < i1; i++)
            c[i] = a[i];
        break;
    case 2:
        for (uint64_t i = i0; i < i1; i++)
            a[i] = b[i] + 3.0 * c[i];
        break;
    case 3:
#ifdef BENCH_X86
        if (j->wide) {
            j->sink[ith & 255] = read_sum_avx2((const uint64_t *)a, i0, i1);
            break;
        }
#endif
#ifdef BENCH_ARM
        j->sink[ith & 255] = read_sum_neon((const uint64_t *)a, i0, i1);
        break;
#endif
        j->sink[ith & 255] = read_sum_scalar((const uint64_t *)a, i0, i1);
        break;
    }
}

int rvl_bench_mem(rvl_bench *b, int reps, rvl_bench_membw *out)
{
    memset(out, 0, sizeof *out);
    if (reps < 1)
        reps = 1;
    uint64_t bytes = b->ws / 2;
    if (bytes < 8ull << 20)
        bytes = 8ull << 20;
    stream_job j = {0};
    j.n = bytes / sizeof(double);
    j.a = big_alloc(b->huge, bytes);
    j.b = big_alloc(b->huge, bytes);
    j.c = big_alloc(b->huge, bytes);
    if (!j.a || !j.b || !j.c) {
        free(j.a);
        free(j.b);
        free(j.c);
        return rvl_seterr(RVL_ENOMEM, "out of memory for 3 bandwidth arrays of %llu MiB",
                          (unsigned long long)(bytes >> 20));
    }
    out->array_bytes = j.n * sizeof(double);
    j.wide = (rvl_dispatch_cpu() & RVL_KCPU_AVX2) != 0;
    j.op = 0; /* first touch on the threads that use the pages */
    const uint64_t huge0 = rvl_bench_huge_bytes();
    rvl_pool_run(b->pool, stream_run, &j);
    const uint64_t huge1 = rvl_bench_huge_bytes();
    out->huge_bytes = huge1 > huge0 ? huge1 - huge0 : 0;
    const double sizes[4] = {0, 2.0 * 8 * (double)j.n, 3.0 * 8 * (double)j.n, 8.0 * (double)j.n};
    double best[4] = {0};
    int rc = 0;
    for (int r = 0; r <= reps && rc == 0; r++) { /* r == 0: warm-up */
        for (int op = 1; op <= 3; op++) {
            if (rvl_interrupted()) {
                rc = rvl_seterr(RVL_EINTR, "interrupted");
                break;
            }
            j.op = op;
            double t0 = rvl_bench_now();
            rvl_pool_run(b->pool, stream_run, &j);
            double t = rvl_bench_now() - t0;
            if (r > 0 && t > 0 && sizes[op] / t > best[op])
                best[op] = sizes[op] / t;
        }
    }
    out->copy_gbs = best[1] / 1e9;
    out->triad_gbs = best[2] / 1e9;
    out->read_gbs = best[3] / 1e9;
    free(j.a);
    free(j.b);
    free(j.c);
    return rc;
}

/* One read-only pass over a caller's buffer on the pool's threads (the
 * read test of rvl_bench_mem), split as the GEMV splits its rows: chunks
 * of the same size taken from a shared counter, so that a thread
 * preempted on a busy machine costs the pass what it costs the kernel
 * (with finer chunks the pass would get round a preemption that stalls
 * the kernel, and the other way round). */
typedef struct {
    const uint64_t *u;        /* 64-byte aligned */
    uint64_t n;               /* 8-byte words */
    uint64_t per;             /* words per chunk */
    bool wide;
    atomic_uint_fast64_t next;
    uint64_t sink[256];
} read_job;

static void read_run(void *arg, int ith, int nth)
{
    read_job *j = arg;
    const uint64_t per = j->per, n_chunks = (j->n + per - 1) / per;
    uint64_t s = 0;
    (void)nth;
    for (;;) {
        const uint64_t ci = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (ci >= n_chunks)
            break;
        const uint64_t i0 = ci * per, i1 = i0 + per < j->n ? i0 + per : j->n;
#ifdef BENCH_X86
        if (j->wide) {
            s += read_sum_avx2(j->u, i0, i1);
            continue;
        }
#endif
#ifdef BENCH_ARM
        s += read_sum_neon(j->u, i0, i1);
        continue;
#endif
        s += read_sum_scalar(j->u, i0, i1);
    }
    j->sink[ith & 255] = s;
}

/* The 8-byte words of bytes at p, from the first 64-byte boundary at or
 * before p (the ring's buffer is 64-byte aligned, so that stays inside
 * it), in chunks of about chunk_bytes. Returns the seconds taken. */
static double read_pass(rvl_bench *b, const char *p, uint64_t bytes, uint64_t chunk_bytes)
{
    read_job j;
    const uintptr_t mis = (uintptr_t)p & 63;
    memset(&j, 0, sizeof j);
    j.u = (const uint64_t *)(const void *)(p - mis);
    j.n = (bytes + mis) / sizeof(uint64_t);
    j.per = chunk_bytes / sizeof(uint64_t);
    if (j.per < 64) /* whole 512-byte steps of read_sum_avx2's loop, at least */
        j.per = 64;
    j.wide = (rvl_dispatch_cpu() & RVL_KCPU_AVX2) != 0;
    atomic_init(&j.next, 0);
    const double t0 = rvl_bench_now();
    rvl_pool_run(b->pool, read_run, &j);
    return rvl_bench_now() - t0;
}

/* --- peak FLOP/s: independent FMA chains that never leave registers --- */

#define PEAK_ITERS 4000000ull

static double fma_ref(uint64_t iters, float *sink)
{
    float a0 = 0.1f, a1 = 0.2f, a2 = 0.3f, a3 = 0.4f, a4 = 0.5f, a5 = 0.6f;
    float a6 = 0.7f, a7 = 0.8f, a8 = 0.9f, a9 = 1.0f, a10 = 1.1f, a11 = 1.2f;
    const float m = 0.999f, c = 0.001f;
    for (uint64_t i = 0; i < iters; i++) {
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
        a8 = a8 * m + c; a9 = a9 * m + c; a10 = a10 * m + c; a11 = a11 * m + c;
    }
    *sink = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    return (double)iters * 12 * 2;
}

#ifdef BENCH_X86
#define FMA_CHAINS(T, FMA, SET1, ADD, iters, lanes, sinkexpr)                          \
    do {                                                                               \
        T a0 = SET1(0.1f), a1 = SET1(0.2f), a2 = SET1(0.3f), a3 = SET1(0.4f);          \
        T a4 = SET1(0.5f), a5 = SET1(0.6f), a6 = SET1(0.7f), a7 = SET1(0.8f);          \
        T a8 = SET1(0.9f), a9 = SET1(1.0f), a10 = SET1(1.1f), a11 = SET1(1.2f);        \
        const T m = SET1(0.999f), c = SET1(0.001f);                                    \
        for (uint64_t i = 0; i < (iters); i++) {                                       \
            a0 = FMA(a0, m, c); a1 = FMA(a1, m, c); a2 = FMA(a2, m, c);                \
            a3 = FMA(a3, m, c); a4 = FMA(a4, m, c); a5 = FMA(a5, m, c);                \
            a6 = FMA(a6, m, c); a7 = FMA(a7, m, c); a8 = FMA(a8, m, c);                \
            a9 = FMA(a9, m, c); a10 = FMA(a10, m, c); a11 = FMA(a11, m, c);            \
        }                                                                              \
        T s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));       \
        s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));                                   \
        sinkexpr;                                                                      \
    } while (0)

__attribute__((target("avx2,fma"))) static double fma_avx2(uint64_t iters, float *sink)
{
    FMA_CHAINS(__m256, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_add_ps, iters, 8,
               *sink = _mm256_cvtss_f32(s));
    return (double)iters * 12 * 8 * 2;
}

__attribute__((target("avx512f"))) static double fma_avx512(uint64_t iters, float *sink)
{
    FMA_CHAINS(__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_add_ps, iters, 16,
               *sink = _mm512_cvtss_f32(s));
    return (double)iters * 12 * 16 * 2;
}
#endif

#ifdef BENCH_ARM
static double fma_neon(uint64_t iters, float *sink)
{
    float32x4_t a[12];
    for (int k = 0; k < 12; k++)
        a[k] = vdupq_n_f32(0.1f * (float)(k + 1));
    const float32x4_t m = vdupq_n_f32(0.999f), c = vdupq_n_f32(0.001f);
    for (uint64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++)
            a[k] = vfmaq_f32(c, a[k], m);
    float32x4_t s = a[0];
    for (int k = 1; k < 12; k++)
        s = vaddq_f32(s, a[k]);
    *sink = vgetq_lane_f32(s, 0);
    return (double)iters * 12 * 4 * 2;
}
#endif

#ifdef BENCH_X86
/* 12 independent vpdpbusd chains in registers: 64 multiply-adds each per
 * instruction */
#define DP(a) a = _mm512_dpbusd_epi32(a, u, s)
__attribute__((target("avx512f,avx512vnni"))) static double dp_avx512vnni(uint64_t iters, float *sink)
{
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2);
    __m512i a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5);
    __m512i a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8);
    __m512i a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (uint64_t i = 0; i < iters; i++) {
        DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5);
        DP(a6); DP(a7); DP(a8); DP(a9); DP(a10); DP(a11);
    }
    __m512i t = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    t = _mm512_add_epi32(t, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    *sink = (float)_mm_cvtsi128_si32(_mm512_castsi512_si128(t));
    return (double)iters * 12 * 64 * 2;
}
#undef DP
#endif

typedef struct {
    int isa;
    bool int8;
    double flops[256];
    float sink[256];
} peak_job;

static void peak_run(void *arg, int ith, int nth)
{
    peak_job *j = arg;
    (void)nth;
    int s = ith & 255;
#ifdef BENCH_X86
    if (j->int8) {
        j->flops[s] = dp_avx512vnni(PEAK_ITERS, &j->sink[s]);
        return;
    }
#endif
    switch (j->isa) {
#ifdef BENCH_X86
    case RVL_ISA_AVX2:
        j->flops[s] = fma_avx2(PEAK_ITERS, &j->sink[s]);
        break;
    case RVL_ISA_AVX512:
        j->flops[s] = fma_avx512(PEAK_ITERS, &j->sink[s]);
        break;
#endif
#ifdef BENCH_ARM
    case RVL_ISA_NEON:
        j->flops[s] = fma_neon(PEAK_ITERS, &j->sink[s]);
        break;
#endif
    default:
        j->flops[s] = fma_ref(PEAK_ITERS, &j->sink[s]);
    }
}

static int isa_id(const char *isa)
{
    if (!isa)
        return rvl_dispatch_isa();
    int id = rvl_dispatch_isa_parse(isa);
    if (id < 0)
        return rvl_seterr(RVL_EINVAL, "unknown instruction set '%s' (ref, avx2, avx512, neon)", isa);
    if (!rvl_dispatch_isa_runnable(id))
        return rvl_seterr(RVL_EUNSUPPORTED, "instruction set '%s' is not available on this CPU or "
                          "not compiled in", isa);
    return id;
}

static int peak(rvl_bench *b, const char *isa, bool int8, double *gflops)
{
    int id = isa_id(isa);
    *gflops = 0;
    if (id < 0)
        return id;
    if (int8 && (id != RVL_ISA_AVX512 || !(rvl_dispatch_cpu() & RVL_KCPU_VNNI)))
        return 0;
    peak_job j;
    memset(&j, 0, sizeof j);
    j.isa = id;
    j.int8 = int8;
    double best = 0;
    for (int r = 0; r < 4; r++) { /* r == 0: warm-up (clocks, page faults) */
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        double t0 = rvl_bench_now();
        rvl_pool_run(b->pool, peak_run, &j);
        double t = rvl_bench_now() - t0, fl = 0;
        for (int i = 0; i < rvl_pool_size(b->pool) && i < 256; i++)
            fl += j.flops[i];
        if (r > 0 && t > 0 && fl / t > best)
            best = fl / t;
    }
    *gflops = best / 1e9;
    return 0;
}

int rvl_bench_peak(rvl_bench *b, const char *isa, double *gflops)
{
    return peak(b, isa, false, gflops);
}

int rvl_bench_peak_int8(rvl_bench *b, const char *isa, double *gops)
{
    return peak(b, isa, true, gops);
}

/* ====================================================================
 * Kernels
 * ==================================================================== */

const char *rvl_bench_op_name(rvl_bench_op op)
{
    static const char *const names[] = {"gemv", "gemm", "quantize", "dequantize",
                                        "rmsnorm", "rope", "softmax"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

/* A pool of valid rows or blocks of format kf: random values of standard
 * deviation sd quantized by the format's own quantizer. For formats with
 * a row header the pool is whole rows of k elements; otherwise any byte
 * sequence cut from it at block boundaries is a valid row. */
#define POOL_ELEMS 32768

static int make_pool(const rvl_kformat *kf, uint64_t k, float sd, uint64_t seed, char **pool,
                     uint64_t *pool_bytes)
{
    rvl_quantize_fn q = kf->quantize;
    uint64_t n = POOL_ELEMS, rows = 1;

    *pool = NULL;
    if (!q)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s has no quantizer to make weights with", kf->name);
    if (kf->row_header) {
        rows = k < POOL_ELEMS ? POOL_ELEMS / k : 1;
        n = k;
    } else {
        n = POOL_ELEMS / kf->block_size * kf->block_size;
        if (n == 0)
            n = kf->block_size;
    }
    uint64_t rb = rvl_kformat_row_bytes(kf, n);
    float *x = malloc(n * sizeof *x);
    char *p = alloc_aligned(rows * rb);
    if (!x || !p) {
        free(x);
        free(p);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t i = 0; i < n; i++)
            x[i] = rng_normal(&seed, sd);
        q(x, p + r * rb, (int64_t)n, NULL);
    }
    free(x);
    *pool = p;
    *pool_bytes = rows * rb;
    return 0;
}

/* Copy the pool over dst[0..bytes) cyclically (bytes: whole rows/blocks). */
static void tile(char *dst, uint64_t bytes, const char *pool, uint64_t pool_bytes, uint64_t start)
{
    uint64_t off = start % pool_bytes, done = 0;
    while (done < bytes) {
        uint64_t n = pool_bytes - off;
        if (n > bytes - done)
            n = bytes - done;
        memcpy(dst + done, pool + off, n);
        done += n;
        off = 0;
    }
}

static int ensure_arena(rvl_bench *b, uint64_t need)
{
    uint64_t want = b->ws;
    if (want < 2 * need)
        want = 2 * need;
    if (b->arena && b->arena_bytes >= want)
        return 0;
    free(b->arena);
    b->arena = big_alloc(b->huge, want);
    b->arena_bytes = b->arena ? want : 0;
    b->fill_type = UINT32_MAX;
    if (!b->arena)
        return rvl_seterr(RVL_ENOMEM, "out of memory for a %llu MiB working set",
                          (unsigned long long)(want >> 20));
    return 0;
}

/* Fill the whole arena with weights of kf (rows of k for row-header
 * formats), unless it already holds them. */
static int fill_arena(rvl_bench *b, const rvl_kformat *kf, uint64_t k, bool packed)
{
    uint64_t key_k = kf->row_header ? k : 0, pack_k = packed ? k : 0;
    /* every variant quantizes to the same bytes (dispatch.h): one fill
     * serves them all, but for the layout */
    if (b->fill_type == kf->type && b->fill_k == key_k && b->fill_pack_k == pack_k)
        return 0;
    char *pool;
    uint64_t pool_bytes;
    int rc = make_pool(kf, k, 1.0f / sqrtf((float)k), 0x5eed ^ kf->type, &pool, &pool_bytes);
    if (rc < 0)
        return rc;
    /* whole units of the pool's granularity only */
    uint64_t unit = kf->row_header ? rvl_kformat_row_bytes(kf, k) : kf->type_size;
    uint64_t bytes = b->arena_bytes / unit * unit;
    tile(b->arena, bytes, pool, pool_bytes, 0);
    free(pool);
    b->fill_type = UINT32_MAX;
    if (packed) {
        /* every whole group of 16 rows of k, as model.c packs a weight
         * (matrices start at multiples of their size: whole groups) */
        const uint64_t P = RVL_PACK16_ROWS;
        const uint64_t gb = P * rvl_kformat_row_bytes(kf, k);
        char *tmp = malloc(gb);
        if (!tmp)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        for (uint64_t o = 0; o + gb <= bytes; o += gb) {
            memcpy(tmp, b->arena + o, gb);
            kf->pack16((int64_t)k, tmp, gb / P, b->arena + o);
        }
        free(tmp);
    }
    b->fill_unit = unit;
    b->fill_bytes = bytes;
    b->fill_type = kf->type;
    b->fill_k = key_k;
    b->fill_pack_k = pack_k;
    b->cursor = 0;
    return 0;
}

/* The next `bytes` of the ring, starting on a block (or row) boundary of
 * what the fill wrote, as rows do in a model file. */
static const char *ring_next(rvl_bench *b, uint64_t bytes)
{
    if (b->cursor + bytes > b->fill_bytes)
        b->cursor = 0;
    const char *p = b->arena + b->cursor;
    b->cursor += bytes;
    return p;
}

/* One case being measured: what its timed step runs, on what. */
typedef struct {
    rvl_bench_op op;
    const rvl_kformat *kf;    /* the format's entry in the measured ISA's table */
    uint64_t n, k;
    uint32_t m;               /* GEMM: activation rows; 1 otherwise */
    uint64_t row_bytes;       /* a row of k elements of kf */
    uint64_t mat_bytes;       /* n rows: what one operation reads from the ring */
    uint64_t inner;           /* operations per timed repetition */
    /* GEMV/GEMM: the forward pass's matmul (engine/matmul.h) of a weight
     * in the ring (w.data moves along it) by m activation rows */
    rvl_matmul mm;
    rvl_weight w;
    float *xf;                /* (m, k) activations as floats */
    const unsigned char *act; /* the same in kf's vec_dot_type (xf itself for F32) */
    size_t act_stride;
    /* the other operations: rows split evenly over the threads */
    const char *src;          /* dequantize: n rows of kf in the ring */
    float *x, *y, *aux;       /* float input, output (GEMV/GEMM too), weights / tables */
} kjob;

#define ROPE_HD 128

static void kjob_run(void *arg, int ith, int nth)
{
    const kjob *j = arg;
    uint64_t r0, r1;
    split_rows(j->n, ith, nth, &r0, &r1);
    switch (j->op) {
    case RVL_BENCH_QUANTIZE:
        for (uint64_t r = r0; r < r1; r++)
            j->kf->quantize(j->x + r * j->k, (char *)j->y + r * j->row_bytes, (int64_t)j->k, NULL);
        break;
    case RVL_BENCH_DEQUANTIZE:
        for (uint64_t r = r0; r < r1; r++)
            j->kf->dequantize(j->src + r * j->row_bytes, j->y + r * j->k, (int64_t)j->k);
        break;
    case RVL_BENCH_RMSNORM:
        for (uint64_t r = r0; r < r1; r++)
            rmsnorm_f32_ref(j->y + r * j->k, j->x + r * j->k, j->aux, (int64_t)j->k, 1e-5f);
        break;
    case RVL_BENCH_ROPE: /* a token's heads of 128, its row of the tables (64 cos, 64 sin) */
        for (uint64_t r = r0; r < r1; r++)
            rope_f32_ref(j->x + r * j->k, (int64_t)(j->k / ROPE_HD), ROPE_HD, ROPE_HD,
                         j->aux + r * ROPE_HD, j->aux + r * ROPE_HD + ROPE_HD / 2, false);
        break;
    case RVL_BENCH_SOFTMAX:
        for (uint64_t r = r0; r < r1; r++)
            softmax_f32_ref(j->y + r * j->k, j->x + r * j->k, (int64_t)j->k);
        break;
    case RVL_BENCH_GEMV:
    case RVL_BENCH_GEMM:
        break; /* kjob_step */
    }
}

/* One timed operation, on the next matrix of the ring where it reads
 * one. */
static void kjob_step(rvl_bench *b, kjob *j)
{
    switch (j->op) {
    case RVL_BENCH_GEMV:
    case RVL_BENCH_GEMM: {
        j->w.data = ring_next(b, j->mat_bytes);
        if (j->w.packed)
            j->w.packed = j->w.data;
        const rvl_weight *w = &j->w;
        float *y = j->y;
        const size_t y_stride = j->n;
        rvl_matmul_act(&j->mm, 1, &w, &y, &y_stride, j->act, j->act_stride, j->m);
        return;
    }
    case RVL_BENCH_DEQUANTIZE:
        j->src = ring_next(b, j->mat_bytes);
        break;
    default:
        break;
    }
    rvl_pool_run(b->pool, kjob_run, j);
}

static void kjob_free(kjob *j)
{
    free(j->mm.act);
    free(j->xf);
    free(j->x);
    free(j->y);
    free(j->aux);
}

/* Bytes one case's weights take in the ring. */
static int case_geometry(const rvl_bench_kcase *c, const rvl_kformat *kf, uint64_t *row_bytes,
                         uint64_t *mat_bytes)
{
    if (c->k == 0 || c->n == 0)
        return rvl_seterr(RVL_EINVAL, "empty shape %llux%llu", (unsigned long long)c->n,
                          (unsigned long long)c->k);
    if (c->k % kf->block_size)
        return rvl_seterr(RVL_EINVAL, "%s: a row of %llu elements is not whole blocks of %u",
                          kf->name, (unsigned long long)c->k, kf->block_size);
    uint64_t rb = rvl_kformat_row_bytes(kf, c->k), mb;
    if (rvl_mul_ovf(rb, c->n, &mb) || mb > (1ull << 40))
        return rvl_seterr(RVL_ERANGE, "shape %llux%llu is too large", (unsigned long long)c->n,
                          (unsigned long long)c->k);
    *row_bytes = rb;
    *mat_bytes = mb;
    return 0;
}

static void fill_floats(float *x, uint64_t n, uint64_t seed, float sd)
{
    for (uint64_t i = 0; i < n; i++)
        x[i] = rng_normal(&seed, sd);
}

/* GEMV/GEMM: the weights in the layout the forward pass gives this format
 * (model.c: packed where the variant has a packed kernel and the rows are
 * whole groups), the activations brought into the format's vec_dot_type
 * as the forward pass does, not timed. */
static int setup_matmul(rvl_bench *b, const rvl_bench_kcase *c, int isa, kjob *j,
                        rvl_bench_kresult *r)
{
    const rvl_kformat *kf = j->kf;
    if (!kf->vec_dot) {
        const rvl_type_info *ti = rvl_type_get(c->type);
        return rvl_seterr(RVL_EUNSUPPORTED, "%s has no dot product kernel",
                          ti ? ti->name : kf->name);
    }
    const rvl_kformat *af = rvl_kformat_get_isa(kf->vec_dot_type, isa);
    if (!af || (af->type != RVL_K_F32 && !af->quantize) || c->k % af->block_size)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: no activation format for rows of %llu", kf->name,
                          (unsigned long long)c->k);
    const char *rp = getenv("RUVLLM_REPACK");
    const bool packed = kf->gemm16 && c->n % RVL_PACK16_ROWS == 0 && !(rp && strcmp(rp, "0") == 0);
    j->mm.pool = b->pool;
    j->mm.act_stride = rvl_kformat_row_bytes(af, c->k);
    if (af->type == RVL_K_Q8_0) /* the block sums and scales after each row (formats.h) */
        j->mm.act_stride = rvl_act_sums_row_bytes((int64_t)c->k);
    j->mm.act = alloc_aligned(j->m * j->mm.act_stride);
    j->xf = alloc_aligned((uint64_t)j->m * c->k * sizeof(float));
    j->y = alloc_aligned((uint64_t)j->m * c->n * sizeof(float));
    if (!j->mm.act || !j->xf || !j->y)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    r->packed = packed;
    int rc;
    if ((rc = ensure_arena(b, j->mat_bytes)) < 0 || (rc = fill_arena(b, kf, c->k, packed)) < 0)
        return rc;
    j->w = (rvl_weight){.present = true, .type = c->type, .kf = kf, .ne0 = c->k, .ne1 = c->n,
                        .row_bytes = j->row_bytes, .data = b->arena,
                        .packed = packed ? b->arena : NULL, .packed_rows = packed ? c->n : 0};
    for (uint32_t t = 0; t < j->m; t++)
        fill_floats(j->xf + (uint64_t)t * c->k, c->k, 77 + t, 1.0f);
    rvl_matmul_prepare_act(&j->mm, &j->w, j->xf, c->k, j->m, &j->act, &j->act_stride);
    /* at least ~32 MB of weights per timed repetition, each matrix the
     * next one in the ring */
    if (c->op == RVL_BENCH_GEMV)
        j->inner = j->mat_bytes >= (32ull << 20) ? 1 : (32ull << 20) / j->mat_bytes;
    r->bytes = (double)j->mat_bytes + (double)j->m * (double)j->act_stride +
               (double)j->m * (double)c->n * 4;
    r->flops = 2.0 * j->m * (double)c->n * (double)c->k;
    return 0;
}

static int setup_quantize(const rvl_bench_kcase *c, kjob *j, rvl_bench_kresult *r)
{
    const uint64_t nk = c->n * c->k;
    if (!j->kf->quantize)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s has no quantizer", j->kf->name);
    j->x = alloc_aligned(nk * sizeof(float));
    j->y = alloc_aligned(j->mat_bytes); /* rows of kf */
    if (!j->x || !j->y)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    fill_floats(j->x, nk, 5, 1.0f);
    r->bytes = (double)nk * 4 + (double)j->mat_bytes;
    return 0;
}

static int setup_dequantize(rvl_bench *b, const rvl_bench_kcase *c, kjob *j, rvl_bench_kresult *r)
{
    const uint64_t nk = c->n * c->k;
    if (!j->kf->dequantize)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s has no dequantizer", j->kf->name);
    j->y = alloc_aligned(nk * sizeof(float));
    if (!j->y)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc;
    if ((rc = ensure_arena(b, j->mat_bytes)) < 0 || (rc = fill_arena(b, j->kf, c->k, false)) < 0)
        return rc;
    r->bytes = (double)j->mat_bytes + (double)nk * 4;
    return 0;
}

/* RMSNorm (unit weights), RoPE (tables of position p for row p, base
 * 10000) and softmax over n rows of k floats. */
static int setup_rowop(const rvl_bench_kcase *c, kjob *j, rvl_bench_kresult *r)
{
    const uint64_t nk = c->n * c->k;
    const bool rope = c->op == RVL_BENCH_ROPE;
    if (rope && c->k % ROPE_HD)
        return rvl_seterr(RVL_EINVAL, "rope: rows must be whole heads of %d", ROPE_HD);
    j->x = alloc_aligned(nk * sizeof(float));
    j->y = rope ? NULL : alloc_aligned(nk * sizeof(float)); /* RoPE rotates in place */
    j->aux = alloc_aligned((rope ? c->n * ROPE_HD : c->k) * sizeof(float));
    if (!j->x || (!rope && !j->y) || !j->aux)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    fill_floats(j->x, nk, 9, 1.0f);
    if (rope) {
        for (uint64_t p = 0; p < c->n; p++)
            for (int i = 0; i < ROPE_HD / 2; i++) {
                float th = (float)p * powf(10000.0f, -2.0f * (float)i / ROPE_HD);
                j->aux[p * ROPE_HD + (uint64_t)i] = cosf(th);
                j->aux[p * ROPE_HD + ROPE_HD / 2 + (uint64_t)i] = sinf(th);
            }
    } else {
        for (uint64_t i = 0; i < c->k; i++)
            j->aux[i] = 1.0f;
    }
    r->bytes = 2.0 * (double)nk * 4;
    r->flops = (c->op == RVL_BENCH_RMSNORM ? 4.0 : rope ? 3.0 : 4.0) * (double)nk;
    return 0;
}

/* The timed repetitions after one warm-up: seconds per operation into
 * times[rep]; for the memory-bound kernels over the ring (GEMV,
 * dequantize) each repetition is paired with a read pass over the next
 * bytes of the ring, as cold as the ones the kernel read, so that the
 * roofline is measured in the same window as the kernel (a shared
 * machine's bandwidth drifts between a measurement at start-up and the
 * kernels): its GB/s into rtimes[rep]. */
static int time_case(rvl_bench *b, kjob *j, int reps, double *times, double *rtimes)
{
    const bool interleave = j->op == RVL_BENCH_GEMV || j->op == RVL_BENCH_DEQUANTIZE;
    const uint64_t nth = (uint64_t)rvl_pool_size(b->pool), bytes = j->mat_bytes;
    /* the kernel's split: GEMV chunks of rows as the matmul takes them,
     * dequantize one static share per thread */
    const uint64_t read_chunk = j->op == RVL_BENCH_GEMV
                                    ? rvl_matmul_chunk_rows(j->n, (int)nth) * j->row_bytes
                                    : (bytes + nth - 1) / nth;
    /* the read pass goes after the kernel in even repetitions, before it
     * in odd ones: each takes its turn at every position of the ring
     * and in the order (a memory whose speed varies by region or after
     * the other operation would otherwise favour one of them) */
    for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up */
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        double tr = 0;
        if (interleave && (rep & 1))
            for (uint64_t i = 0; i < j->inner; i++)
                tr += read_pass(b, ring_next(b, bytes), bytes, read_chunk);
        double t0 = rvl_bench_now();
        for (uint64_t i = 0; i < j->inner; i++)
            kjob_step(b, j);
        double t = (rvl_bench_now() - t0) / (double)j->inner;
        if (rep >= 0)
            times[rep] = t;
        if (interleave && !(rep & 1))
            for (uint64_t i = 0; i < j->inner; i++)
                tr += read_pass(b, ring_next(b, bytes), bytes, read_chunk);
        if (interleave && rep >= 0)
            rtimes[rep] = tr > 0 ? (double)bytes * (double)j->inner / tr / 1e9 : 0;
    }
    return 0;
}

int rvl_bench_kernel(rvl_bench *b, const rvl_bench_kcase *c, rvl_bench_kresult *r)
{
    const bool rowop = c->op == RVL_BENCH_RMSNORM || c->op == RVL_BENCH_ROPE ||
                       c->op == RVL_BENCH_SOFTMAX;
    const int isa = rowop ? RVL_ISA_REF : isa_id(c->isa);
    const int reps = c->reps < 1 ? 1 : c->reps > 255 ? 255 : c->reps;
    double times[256], rtimes[256]; /* kernel seconds, interleaved read GB/s */
    kjob j;
    int rc;

    memset(r, 0, sizeof *r);
    memset(&j, 0, sizeof j);
    if (isa < 0)
        return isa;
    r->impl = rvl_dispatch_isa_name(isa);
    j.op = c->op;
    j.n = c->n;
    j.k = c->k;
    j.m = c->op == RVL_BENCH_GEMM ? (c->m ? c->m : 1) : 1;
    j.inner = 1;
    j.kf = rvl_kformat_get_isa(rowop ? RVL_K_F32 : c->type, isa);
    if (!j.kf)
        return rvl_seterr(RVL_EINVAL, "unknown weight format %u", c->type);
    if ((rc = case_geometry(c, j.kf, &j.row_bytes, &j.mat_bytes)) < 0)
        return rc;
    /* n * k < 2^40 elements: checked with the bytes */
    if (c->n * c->k > (1ull << 31) && !(c->op == RVL_BENCH_GEMV || c->op == RVL_BENCH_GEMM))
        return rvl_seterr(RVL_ERANGE, "shape too large for %s", rvl_bench_op_name(c->op));

    switch (c->op) {
    case RVL_BENCH_GEMV:
    case RVL_BENCH_GEMM:
        rc = setup_matmul(b, c, isa, &j, r);
        break;
    case RVL_BENCH_QUANTIZE:
        rc = setup_quantize(c, &j, r);
        break;
    case RVL_BENCH_DEQUANTIZE:
        rc = setup_dequantize(b, c, &j, r);
        break;
    case RVL_BENCH_RMSNORM:
    case RVL_BENCH_ROPE:
    case RVL_BENCH_SOFTMAX:
        rc = setup_rowop(c, &j, r);
        break;
    }
    if (rc == 0)
        rc = time_case(b, &j, reps, times, rtimes);
    if (rc == 0) {
        rvl_bench_stat st;
        rvl_bench_stats(times, reps, &st);
        r->median_s = st.median;
        r->min_s = st.min;
        r->max_s = st.max;
        if (j.op == RVL_BENCH_GEMV || j.op == RVL_BENCH_DEQUANTIZE) {
            rvl_bench_stats(rtimes, reps, &st);
            r->read_gbs = st.median;
            r->read_min_gbs = st.min;
            r->read_max_gbs = st.max;
        }
    }
    kjob_free(&j);
    return rc;
}

/* ====================================================================
 * Model speed: a timed decode from an empty cache
 * ==================================================================== */

int rvl_bench_decode(rvl_ctx *c, uint32_t n_vocab, uint32_t n, uint32_t batch, uint64_t seed,
                     double *seconds)
{
    return rvl_bench_decode_at(c, n_vocab, 0, n, batch, seed, seconds);
}

int rvl_bench_decode_at(rvl_ctx *c, uint32_t n_vocab, uint32_t depth, uint32_t n, uint32_t batch,
                        uint64_t seed, double *seconds)
{
    *seconds = 0;
    if (n == 0 || n_vocab == 0)
        return rvl_seterr(RVL_EINVAL, "nothing to decode");
    if (batch == 0 || batch > n)
        batch = n;
    if (n > rvl_ctx_n_ctx(c) || depth > rvl_ctx_n_ctx(c) - n)
        return rvl_seterr(RVL_ERANGE, "%u tokens at depth %u do not fit in a context of %u", n,
                          depth, rvl_ctx_n_ctx(c));
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(rng_next(&seed) % n_vocab);
    int rc = 0;
    /* the depth: reused when the cache already holds it */
    if (rvl_ctx_pos(c) >= depth && depth > 0)
        rc = rvl_ctx_truncate(c, depth);
    else if ((rvl_ctx_reset(c), depth > 0))
        rc = rvl_ctx_fill_random(c, depth, seed);
    if (rc < 0) {
        free(ids);
        return rc;
    }
    const float *logits;
    double t0 = rvl_bench_now();
    for (uint32_t i = 0; i < n && rc == 0; i += batch)
        rc = rvl_decode(c, ids + i, n - i < batch ? n - i : batch, &logits);
    *seconds = rvl_bench_now() - t0;
    free(ids);
    if (depth == 0)
        rvl_ctx_reset(c);
    return rc;
}

/* ====================================================================
 * The model's label: its file type
 * ==================================================================== */

/* general.file_type names the mix the file was quantized with; the most
 * common tensor type does not: a Q4_K_M file of a model whose rows are
 * not whole 256-element blocks (SmolLM2's 576) holds mostly Q5_0, which
 * llama.cpp's quantizer falls back to for them. */
const char *rvl_bench_file_type(const rvl_file *f, char *buf, size_t cap)
{
    const rvl_kv *kv = rvl_file_find_kv(f, "general.file_type");
    uint64_t ft;
    if (kv && rvl_kv_get_u64(kv, &ft) == 0) {
        for (size_t i = 0; rvl_qmix_at(i); i++)
            if (rvl_qmix_at(i)->ftype == ft) {   /* the first: a mix's name, not its alias */
                snprintf(buf, cap, "%s", rvl_qmix_at(i)->name);
                return buf;
            }
    }
    rvl_str name;
    if ((kv = rvl_file_find_kv(f, "ruvllm.file_type")) && rvl_kv_get_str(kv, &name) == 0 &&
        name.len) {
        snprintf(buf, cap, "%.*s", (int)name.len, name.ptr);
        return buf;
    }
    /* the census: llama.cpp's types, then the project's */
    enum { N_GGML = RVL_TYPE_GGML_COUNT, N_ALL = N_GGML + RVL_TYPE_RVL_END - RVL_TYPE_RVL_FIRST };
    uint64_t by_type[N_ALL] = {0};
    for (uint64_t i = 0; i < rvl_file_n_tensors(f); i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        if (t->n_dims != 2)
            continue;
        if (t->type < N_GGML)
            by_type[t->type] += t->n_elements;
        else if (t->type >= RVL_TYPE_RVL_FIRST && t->type < RVL_TYPE_RVL_END)
            by_type[N_GGML + t->type - RVL_TYPE_RVL_FIRST] += t->n_elements;
    }
    uint32_t dom = 0;
    for (uint32_t t = 0; t < N_ALL; t++)
        if (by_type[t] > by_type[dom])
            dom = t;
    const rvl_type_info *ti =
        rvl_type_get(dom < N_GGML ? dom : dom - N_GGML + RVL_TYPE_RVL_FIRST);
    snprintf(buf, cap, "%s", ti ? ti->name : "?");
    return buf;
}

/* ====================================================================
 * Synthetic models: llama GGUFs of random weights of a named shape
 * ==================================================================== */

static const rvl_bench_shape shapes[] = {
    /* name            dim  layers heads kv  ff     vocab   ctx   rope base  tied output */
    {"llama-7b",       4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false},
    {"llama-13b",      5120, 40, 40, 40, 13824, 32000, 4096, 10000.0f, false},
    {"llama-1b",       2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f, true},
    {"llama-3b",       3072, 28, 24, 8, 8192, 128256, 8192, 500000.0f, true},
    {"llama-8b",       4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, false},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false},
    {"smollm2-135m",   576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true},
    {"smollm2-360m",   960, 32, 15, 5, 2560, 49152, 8192, 100000.0f, true},
    {"smollm2-1.7b",   2048, 24, 32, 32, 8192, 49152, 8192, 130000.0f, true},
};

const rvl_bench_shape *rvl_bench_shape_at(size_t i)
{
    return i < sizeof shapes / sizeof shapes[0] ? &shapes[i] : NULL;
}

const rvl_bench_shape *rvl_bench_shape_find(const char *name)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0)
            return &shapes[i];
    return NULL;
}

/* The format a matrix with rows of k elements gets: `type`, or the
 * replacement llama.cpp's quantizer uses when k is not whole blocks of it,
 * or F16 as the last resort. */
static uint32_t synth_type(uint32_t type, uint64_t k)
{
    const rvl_kformat *kf = rvl_kformat_get(type);
    if (kf && k % kf->block_size == 0)
        return type;
    uint32_t alt;
    switch (type) {
    case RVL_K_Q2_K: case RVL_K_Q3_K: case RVL_K_IQ4_XS: alt = RVL_K_IQ4_NL; break;
    case RVL_K_Q4_K: alt = RVL_K_Q5_0; break;
    case RVL_K_Q5_K: alt = RVL_K_Q5_1; break;
    case RVL_K_Q6_K: alt = RVL_K_Q8_0; break;
    default: alt = RVL_K_F16;
    }
    kf = rvl_kformat_get(alt);
    return kf && k % kf->block_size == 0 ? alt : RVL_K_F16;
}

typedef struct {
    char name[64];
    uint32_t type;
    uint64_t ne0, ne1;        /* ne1 == 0: a vector of ones (f32) */
    float sd;
} synth_tensor;

static void synth_add(synth_tensor *t, size_t *n, uint32_t type, const char *name, uint64_t ne0,
                      uint64_t ne1)
{
    if (t) {
        synth_tensor *x = &t[*n];
        snprintf(x->name, sizeof x->name, "%s", name);
        x->ne0 = ne0;
        x->ne1 = ne1;
        x->type = ne1 ? synth_type(type, ne0) : RVL_K_F32;
        /* embeddings of unit scale; matrices that keep unit-variance
         * inputs at unit variance */
        x->sd = !ne1 ? 0.0f : strcmp(name, "token_embd.weight") == 0 ? 1.0f : 1.0f / sqrtf((float)ne0);
    }
    (*n)++;
}

/* The tensors of a shape, in file order. Returns the count; `t` may be
 * NULL to count. */
static size_t synth_tensors(const rvl_bench_shape *s, uint32_t type, synth_tensor *t)
{
    const uint64_t E = s->n_embd, F = s->n_ff, V = s->n_vocab;
    const uint64_t hd = s->n_embd / s->n_head;
    const uint64_t QD = s->n_head * hd, KVD = s->n_head_kv * hd;
    static const struct {
        const char *suffix;
        int a, b; /* 0: E, 1: QD, 2: KVD, 3: F, -1: none */
    } layer[] = {
        {"attn_norm.weight", 0, -1}, {"attn_q.weight", 0, 1}, {"attn_k.weight", 0, 2},
        {"attn_v.weight", 0, 2}, {"attn_output.weight", 1, 0}, {"ffn_norm.weight", 0, -1},
        {"ffn_gate.weight", 0, 3}, {"ffn_up.weight", 0, 3}, {"ffn_down.weight", 3, 0},
    };
    const uint64_t dims[4] = {E, QD, KVD, F};
    size_t n = 0;
    char nm[64];

    synth_add(t, &n, type, "token_embd.weight", E, V);
    synth_add(t, &n, type, "output_norm.weight", E, 0);
    if (!s->tied_output)
        synth_add(t, &n, type, "output.weight", E, V);
    for (uint32_t l = 0; l < s->n_layer; l++)
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
            snprintf(nm, sizeof nm, "blk.%u.%s", l, layer[i].suffix);
            synth_add(t, &n, type, nm, dims[layer[i].a], layer[i].b < 0 ? 0 : dims[layer[i].b]);
        }
    return n;
}

static uint64_t tensor_bytes(const synth_tensor *t)
{
    if (!t->ne1)
        return t->ne0 * 4;
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    return rvl_kformat_row_bytes(kf, t->ne0) * t->ne1;
}

static int synth_check(const rvl_bench_shape *s, uint32_t type)
{
    const rvl_kformat *kf = rvl_kformat_get(type);
    /* the forward pass needs vec_dot (matrices) and dequantize (the
     * embedding); making the weights needs a quantizer */
    if (!kf || !kf->vec_dot || !kf->dequantize || !kf->quantize ||
        (kf->flags & RVL_KF_ACT && type != RVL_K_Q8_0))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s cannot be used as a weight format of a synthetic "
                          "model", kf ? kf->name : "this type");
    if (s->n_head == 0 || s->n_embd % s->n_head || s->n_head_kv == 0 || s->n_head % s->n_head_kv)
        return rvl_seterr(RVL_EINVAL, "synthetic shape %s is inconsistent", s->name);
    return 0;
}

uint64_t rvl_bench_synth_size(const rvl_bench_shape *s, uint32_t type)
{
    if (synth_check(s, type) < 0)
        return 0;
    size_t n = synth_tensors(s, type, NULL);
    synth_tensor *t = calloc(n, sizeof *t);
    if (!t)
        return 0;
    synth_tensors(s, type, t);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += tensor_bytes(&t[i]);
    free(t);
    return total;
}

/* A byte-level BPE vocabulary of n distinct tokens "<tok N>"; nothing
 * tokenizes to them but ids, which is all a speed test needs. */
static int synth_vocab(rvl_gguf_writer *w, uint32_t n)
{
    rvl_str *strs = malloc((size_t)n * sizeof *strs);
    int32_t *types = malloc((size_t)n * sizeof *types);
    char *text = malloc((size_t)n * 16);
    int rc;
    if (!strs || !types || !text) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        int l = snprintf(text + (size_t)i * 16, 16, "<tok%u>", i);
        strs[i] = (rvl_str){text + (size_t)i * 16, (uint64_t)l};
        types[i] = i < 2 ? RVL_TOK_CONTROL : RVL_TOK_NORMAL;
    }
    rvl_str merge = {"< t", 3};
    if ((rc = rvl_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2")) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "tokenizer.ggml.pre", "gpt-2")) < 0 ||
        (rc = rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.tokens", strs, n)) < 0 ||
        (rc = rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", RVL_GGUF_I32, types, n)) < 0 ||
        (rc = rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.merges", &merge, 1)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 0)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 1)) < 0 ||
        (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", false)) < 0)
        goto out;
out:
    free(strs);
    free(types);
    free(text);
    return rc;
}

int rvl_bench_synth_write(const char *path, const rvl_bench_shape *s, uint32_t type,
                          rvl_bench_progress_fn progress, void *ud)
{
    rvl_gguf_writer *w = NULL;
    synth_tensor *t = NULL;
    float *ones = NULL;
    char *buf = NULL, *pool = NULL;
    int rc;

    if ((rc = synth_check(s, type)) < 0)
        return rc;
    size_t n = synth_tensors(s, type, NULL);
    t = calloc(n, sizeof *t);
    ones = malloc((size_t)s->n_embd * sizeof *ones);
    const uint64_t BUF = 8ull << 20;
    buf = malloc(BUF);
    if (!t || !ones || !buf) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    synth_tensors(s, type, t);
    for (uint32_t i = 0; i < s->n_embd; i++)
        ones[i] = 1.0f;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < n; i++)
        total += tensor_bytes(&t[i]);

    if ((rc = rvl_gguf_writer_open(&w, path)) < 0)
        goto fail;
    char name[96];
    const rvl_type_info *ti = rvl_type_get(type);
    snprintf(name, sizeof name, "synthetic %s %s (random weights)", s->name, ti ? ti->name : "?");
    if ((rc = rvl_gguf_writer_kv_str(w, "general.architecture", "llama")) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "general.name", name)) < 0 ||
        (rc = rvl_gguf_writer_kv_bool(w, "ruvllm.synthetic", true)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "llama.block_count", s->n_layer)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "llama.context_length", s->n_ctx_train)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "llama.embedding_length", s->n_embd)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "llama.feed_forward_length", s->n_ff)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "llama.attention.head_count", s->n_head)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "llama.attention.head_count_kv", s->n_head_kv)) < 0 ||
        (rc = rvl_gguf_writer_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f)) < 0 ||
        (rc = rvl_gguf_writer_kv_f32(w, "llama.rope.freq_base", s->rope_base)) < 0 ||
        (rc = synth_vocab(w, s->n_vocab)) < 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        uint64_t ne[2] = {t[i].ne0, t[i].ne1};
        if ((rc = rvl_gguf_writer_add_tensor(w, t[i].name, t[i].ne1 ? t[i].type : RVL_TYPE_F32,
                                             t[i].ne1 ? 2 : 1, ne, t[i].ne1 ? NULL : ones)) < 0)
            goto fail;
    }
    if ((rc = rvl_gguf_writer_begin_data(w)) < 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].ne1) {
            done += tensor_bytes(&t[i]);
            continue;
        }
        const rvl_kformat *kf = rvl_kformat_get(t[i].type);
        uint64_t pool_bytes, bytes = tensor_bytes(&t[i]);
        if ((rc = make_pool(kf, t[i].ne0, t[i].sd, 1000 + i, &pool, &pool_bytes)) < 0)
            goto fail;
        /* whole pool units per chunk keep rows and blocks aligned */
        uint64_t chunk = BUF / pool_bytes * pool_bytes;
        if (chunk == 0) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: rows too long for a synthetic model", t[i].name);
            goto fail;
        }
        tile(buf, chunk, pool, pool_bytes, 0);
        for (uint64_t off = 0; off < bytes; off += chunk) {
            uint64_t m = bytes - off < chunk ? bytes - off : chunk;
            if (rvl_interrupted()) {
                rc = rvl_seterr(RVL_EINTR, "interrupted");
                goto fail;
            }
            if ((rc = rvl_gguf_writer_tensor_data(w, i, buf, m)) < 0)
                goto fail;
            done += m;
            if (progress)
                progress(ud, done, total);
        }
        free(pool);
        pool = NULL;
    }
    rc = rvl_gguf_writer_finish(w);
    w = NULL;
    if (rc < 0)
        goto fail;
    free(t);
    free(ones);
    free(buf);
    return 0;
fail:
    rvl_gguf_writer_abort(w);
    free(pool);
    free(t);
    free(ones);
    free(buf);
    return rc;
}

int rvl_bench_synth_open(rvl_model **out, const rvl_bench_shape *s, uint32_t type, const char *dir,
                         rvl_bench_progress_fn progress, void *ud)
{
    char tmpl[4096], path[4200];
    int rc;

    *out = NULL;
    if ((rc = synth_check(s, type)) < 0)
        return rc;
    if (!dir || !*dir)
        dir = "/tmp";
    uint64_t need = rvl_bench_synth_size(s, type) + (64ull << 20);
    struct statvfs sv;
    if (statvfs(dir, &sv) == 0) {
        uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        if (avail < need)
            return rvl_seterr(RVL_EIO, "%s: %llu MiB free, the synthetic %s model needs %llu MiB "
                              "(set TMPDIR to a larger disk)", dir,
                              (unsigned long long)(avail >> 20), s->name,
                              (unsigned long long)(need >> 20));
    }
    /* hidden, removed on interruption and, after a SIGKILL, by the next
     * run (rvl_afile_mkdtemp): hundreds of MB are never left behind */
    char base[4096];
    if (snprintf(base, sizeof base, "%s/ruvllm-synth", dir) >= (int)sizeof base)
        return rvl_seterr(RVL_EINVAL, "%s: directory name too long", dir);
    if ((rc = rvl_afile_mkdtemp(base, tmpl, sizeof tmpl)) < 0)
        return rc;
    snprintf(path, sizeof path, "%s/%s.gguf", tmpl, s->name);
    rc = rvl_bench_synth_write(path, s, type, progress, ud);
    if (rc == 0)
        rc = rvl_model_open(out, path);
    /* the model maps the file: the mapping outlives the name */
    rvl_afile_dtemp_abort(tmpl);
    return rc;
}
