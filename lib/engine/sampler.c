/*
 * sampler.c - choosing the next token.
 *
 * The chain follows llama.cpp's default order: penalties over the last
 * repeat_last_n tokens, top-k, top-p, min-p, temperature, then a draw.
 * temp <= 0 means greedy (argmax after penalties). The generator is
 * splitmix64 seeded by the caller, so a fixed seed reproduces a run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

typedef struct {
    float logit;
    int32_t id;
    float p;
} cand;

struct rvl_sampler {
    rvl_sampler_params p;
    uint32_t n_vocab;
    uint64_t rng;
    cand *c;                /* (n_vocab) scratch */
    int32_t *hist;          /* ring of the last repeat_last_n tokens */
    uint32_t hist_n, hist_pos, hist_cap;
    uint32_t *counts;       /* (n_vocab) occurrences in the window */
};

void rvl_sampler_defaults(rvl_sampler_params *p)
{
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->freq_penalty = 0.0f;
    p->presence_penalty = 0.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static double uniform(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

int rvl_sampler_open(rvl_sampler **out, const rvl_sampler_params *p, uint32_t n_vocab)
{
    rvl_sampler *s;

    *out = NULL;
    if (n_vocab == 0)
        return rvl_seterr(RVL_EINVAL, "empty vocabulary");
    if (!(p->temp < INFINITY) || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repeat_penalty > 0 && p->repeat_penalty < INFINITY) || !isfinite(p->freq_penalty) ||
        !isfinite(p->presence_penalty) || p->repeat_last_n < 0)
        return rvl_seterr(RVL_EINVAL, "invalid sampling parameters");
    s = calloc(1, sizeof *s);
    if (!s)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed;
    s->hist_cap = (uint32_t)p->repeat_last_n;
    s->c = malloc(n_vocab * sizeof *s->c);
    s->counts = calloc(n_vocab, sizeof *s->counts);
    s->hist = malloc((s->hist_cap ? s->hist_cap : 1) * sizeof *s->hist);
    if (!s->c || !s->counts || !s->hist) {
        rvl_sampler_close(s);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

void rvl_sampler_close(rvl_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->hist);
    free(s->counts);
    free(s);
}

void rvl_sampler_reset(rvl_sampler *s)
{
    s->hist_n = s->hist_pos = 0;
    memset(s->counts, 0, s->n_vocab * sizeof *s->counts);
    s->rng = s->p.seed;
}

void rvl_sampler_accept(rvl_sampler *s, int32_t id)
{
    if (s->hist_cap == 0 || id < 0 || (uint32_t)id >= s->n_vocab)
        return;
    if (s->hist_n == s->hist_cap) {
        s->counts[s->hist[s->hist_pos]]--;
    } else {
        s->hist_n++;
    }
    s->hist[s->hist_pos] = id;
    s->counts[id]++;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
}

static int cmp_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* stable: lower id first among ties */
}

/* Min-heap on (logit, -id) so the heap root is the weakest of the k kept. */
static bool weaker(const cand *a, const cand *b)
{
    return cmp_desc(a, b) > 0;
}

static void sift_down(cand *h, uint32_t k, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && weaker(&h[l], &h[m]))
            m = l;
        if (r < k && weaker(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Move the k largest of c[0..n) to the front, sorted best first:
 * O(n log k) with a heap, then a sort of the k. */
static void top_sorted(cand *c, uint32_t n, uint32_t k)
{
    if (k < n) {
        for (uint32_t i = k / 2; i-- > 0;)
            sift_down(c, k, i);
        for (uint32_t i = k; i < n; i++) {
            if (weaker(&c[0], &c[i])) {
                c[0] = c[i];
                sift_down(c, k, 0);
            }
        }
    }
    qsort(c, k < n ? k : n, sizeof *c, cmp_desc);
}

int32_t rvl_sampler_sample(rvl_sampler *s, const float *logits)
{
    const rvl_sampler_params *p = &s->p;
    uint32_t n = s->n_vocab;
    cand *c = s->c;

    for (uint32_t i = 0; i < n; i++) {
        float l = logits[i];
        uint32_t cnt = s->counts[i];
        if (cnt) {
            /* llama.cpp's penalties: repetition divides positive logits and
             * multiplies negative ones; frequency and presence subtract */
            if (p->repeat_penalty != 1.0f)
                l = l <= 0 ? l * p->repeat_penalty : l / p->repeat_penalty;
            l -= (float)cnt * p->freq_penalty + p->presence_penalty;
        }
        c[i].logit = isnan(l) ? -INFINITY : l;
        c[i].id = (int32_t)i;
    }

    if (p->temp <= 0) {
        uint32_t best = 0;
        for (uint32_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit)
                best = i;
        return c[best].id;
    }

    uint32_t k = p->top_k > 0 && (uint32_t)p->top_k < n ? (uint32_t)p->top_k : n;
    top_sorted(c, n, k);
    n = k;
    /* +inf takes all the probability; -inf first: every logit was NaN */
    if (isinf(c[0].logit))
        return c[0].id;

    /* probabilities (temperature 1) for top-p and min-p, as llama.cpp */
    float mx = c[0].logit;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - mx);
        sum += c[i].p;
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        uint32_t keep = n;
        for (uint32_t i = 0; i < n; i++) {
            cum += c[i].p / sum;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        /* keep tokens with p >= min_p * p_max; p_max's relative weight is 1 */
        uint32_t keep = 1;
        while (keep < n && c[keep].p >= p->min_p)
            keep++;
        n = keep;
    }

    /* temperature, then draw */
    sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - mx) / p->temp);
        sum += c[i].p;
    }
    double r = uniform(&s->rng) * sum, acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc)
            return c[i].id;
    }
    return c[n - 1].id;
}
