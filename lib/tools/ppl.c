/*
 * ppl.c - perplexity over windows, as llama-perplexity computes it,
 * and the KL-divergence base file (`ruvllm bench ppl`).
 *
 * A window of n_ctx tokens (the first replaced by BOS when the model adds
 * one) is decoded from an empty cache; the logits of positions
 * n_ctx/2 .. n_ctx-2 score the token after each. With all_logits the
 * window goes through in batches of n_batch tokens; without, the unscored
 * first half goes in one call and the rest token by token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "format/format_int.h"
#include "ruvllm_tools.h"

/* ====================================================================
 * Perplexity and the KL-divergence base file
 *
 * File layout (little-endian), written by --kl-base, read by --kl:
 *   0   char[8]  magic "RVLLOGP\0"
 *   8   u32      version (1)
 *   12  u32      n_vocab
 *   16  u32      n_ctx (window)
 *   20  u32      first (scored positions are first .. n_ctx-2; = n_ctx/2)
 *   24  u32      n_windows
 *   28  i32      bos (written over each window's first token; -1: none)
 *   32  i32      tokens[n_windows * n_ctx]  (the text's tokens)
 *   ..  f32      per window, per scored position: the n_vocab natural
 *                log-probabilities (log-softmax of the logits)
 *   end u64      XXH3-64 of every byte before it
 * ==================================================================== */

#define KL_MAGIC "RVLLOGP"
#define KL_VERSION 1u
#define KL_HEADER 32u

struct rvl_ppl {
    rvl_ctx *ctx;
    bool batched;             /* all_logits: decodes of n_batch tokens */
    uint32_t n_batch;
    uint32_t n_vocab, n_ctx, first, n_windows, next;
    int32_t bos;
    int32_t *tokens;          /* owned: n_windows * n_ctx */
    int32_t *win;             /* owned: n_ctx, the window as decoded */
    float *lp;                /* owned: n_vocab log-probabilities */
    /* statistics */
    uint64_t count;
    double nll, nll2;
    double base_nll, base_nll2, kl, kl2, kl_max;
    uint64_t same_top;
    /* --kl-base */
    rvl_afile *save;
    XXH3_state_t *xxh;
    char *save_path;
    /* --kl */
    rvl_map base;
    char *base_path;          /* owned copy, for messages */
    uint32_t file_windows;    /* windows the base file holds */
};

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void wr32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* Map and check a base file against the model (n_vocab) and, when
 * n_ctx != 0, the window size. Everything is checked before use: sizes
 * with overflow-safe arithmetic, the checksum, every token id. */
static int base_open(rvl_ppl *p, const char *path, uint32_t n_ctx, uint32_t n_vocab)
{
    int rc = rvl_map_file(&p->base, path);
    if (rc < 0)
        return rc;
    const unsigned char *b = p->base.base;
    const uint64_t size = p->base.size;
    if (size < KL_HEADER + 8)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: %llu bytes is shorter than the header", path,
                          (unsigned long long)size);
    if (memcmp(b, KL_MAGIC, 8) != 0)
        return rvl_seterr(RVL_EFORMAT, "%s: not a ruvllm logits file (bad magic at offset 0)", path);
    uint32_t ver = rd32(b + 8), nv = rd32(b + 12), nc = rd32(b + 16), first = rd32(b + 20);
    uint32_t nw = rd32(b + 24);
    int32_t bos = (int32_t)rd32(b + 28);
    if (ver != KL_VERSION)
        return rvl_seterr(RVL_EFORMAT, "%s: version %u at offset 8 is not supported (this is %u)", path,
                          ver, KL_VERSION);
    if (nv != n_vocab)
        return rvl_seterr(RVL_EINVAL, "%s: made with a vocabulary of %u tokens, the model has %u", path,
                          nv, n_vocab);
    if (nc < 4 || nc > (1u << 20) || first != nc / 2)
        return rvl_seterr(RVL_EFORMAT, "%s: window size %u / first scored position %u at offset 16 "
                          "are invalid", path, nc, first);
    if (n_ctx && nc != n_ctx)
        return rvl_seterr(RVL_EINVAL, "%s: made with windows of %u tokens, not %u (drop -c or use -c %u)",
                          path, nc, n_ctx, nc);
    if (nw == 0)
        return rvl_seterr(RVL_EFORMAT, "%s: no windows (offset 24)", path);
    if (bos < -1 || bos >= (int32_t)nv)
        return rvl_seterr(RVL_EFORMAT, "%s: BOS id %d at offset 28 is invalid", path, bos);
    uint64_t ntok, tokb, rows, rowb, datab, want;
    if (rvl_mul_ovf(nw, nc, &ntok) || rvl_mul_ovf(ntok, 4, &tokb) ||
        rvl_mul_ovf(nw, (uint64_t)(nc - 1 - first), &rows) || rvl_mul_ovf(nv, 4, &rowb) ||
        rvl_mul_ovf(rows, rowb, &datab) || rvl_add_ovf(KL_HEADER + 8, tokb, &want) ||
        rvl_add_ovf(want, datab, &want))
        return rvl_seterr(RVL_EFORMAT, "%s: header sizes overflow", path);
    if (size != want)
        return rvl_seterr(RVL_EFORMAT, "%s: %s: the header describes %llu bytes, the file has %llu", path,
                          size < want ? "truncated" : "trailing data", (unsigned long long)want,
                          (unsigned long long)size);
    if (XXH3_64bits(b, size - 8) != rd64(b + size - 8))
        return rvl_seterr(RVL_EFORMAT, "%s: checksum mismatch (the file is corrupted)", path);
    const unsigned char *tp = b + KL_HEADER;
    for (uint64_t i = 0; i < ntok; i++) {
        int32_t id = (int32_t)rd32(tp + 4 * i);
        if (id < 0 || (uint32_t)id >= nv)
            return rvl_seterr(RVL_EFORMAT, "%s: token id %d at offset %llu is outside the vocabulary",
                              path, id, (unsigned long long)(KL_HEADER + 4 * i));
    }
    p->n_ctx = nc;
    p->first = first;
    p->n_windows = nw;
    p->file_windows = nw;
    p->bos = bos;
    return 0;
}

/* Log-softmax of one row of logits into lp; returns the argmax. */
static uint32_t log_softmax(const float *logits, uint32_t n, float *lp)
{
    float mx = logits[0];
    uint32_t am = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > mx) {
            mx = logits[i];
            am = i;
        }
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += expf(logits[i] - mx);
    const float lse = mx + (float)log(sum);
    for (uint32_t i = 0; i < n; i++)
        lp[i] = logits[i] - lse;
    return am;
}

static int save_write(rvl_ppl *p, const void *buf, size_t n)
{
    XXH3_64bits_update(p->xxh, buf, n);
    return rvl_afile_write(p->save, buf, n);
}

int rvl_ppl_open(rvl_ppl **out, const rvl_model *m, const rvl_ppl_params *prm, const int32_t *tokens,
                 size_t n_tokens)
{
    const rvl_hparams *hp = rvl_model_hparams(m);
    const rvl_tokenizer *tok = rvl_model_tokenizer(m);
    rvl_ppl *p = calloc(1, sizeof *p);
    int rc;

    *out = NULL;
    if (!p)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    p->n_vocab = hp->n_vocab;
    p->bos = rvl_tok_add_bos(tok) ? rvl_tok_bos(tok) : -1;
    if (p->bos < 0)
        p->bos = -1;

    if (prm->base_path) {
        int32_t model_bos = p->bos;
        if ((rc = base_open(p, prm->base_path, prm->n_ctx, hp->n_vocab)) < 0)
            goto fail;
        if (!(p->base_path = strdup(prm->base_path))) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        if (p->bos != model_bos) {
            rc = rvl_seterr(RVL_EINVAL, "%s: made with BOS %d at each window's start, this model uses %d",
                            prm->base_path, p->bos, model_bos);
            goto fail;
        }
        if (prm->n_windows && prm->n_windows < p->n_windows)
            p->n_windows = prm->n_windows;
        uint64_t nt = (uint64_t)p->n_windows * p->n_ctx;
        p->tokens = malloc(nt * sizeof *p->tokens);
        if (!p->tokens) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        const unsigned char *tp = (const unsigned char *)p->base.base + KL_HEADER;
        for (uint64_t i = 0; i < nt; i++)
            p->tokens[i] = (int32_t)rd32(tp + 4 * i);
        if (tokens && (n_tokens < nt || memcmp(tokens, p->tokens, nt * sizeof *tokens) != 0)) {
            rc = rvl_seterr(RVL_EINVAL, "%s: was computed on a different text (or tokenization) than "
                            "the one given", prm->base_path);
            goto fail;
        }
    } else {
        p->n_ctx = prm->n_ctx ? prm->n_ctx : 512;
        p->first = p->n_ctx / 2;
        if (p->n_ctx < 4) {
            rc = rvl_seterr(RVL_EINVAL, "a window of %u tokens is too small (at least 4)", p->n_ctx);
            goto fail;
        }
        if (!tokens || n_tokens < p->n_ctx) {
            rc = rvl_seterr(RVL_EINVAL, "the text has %zu tokens, fewer than one window of %u "
                            "(use a longer text or a smaller -c)", n_tokens, p->n_ctx);
            goto fail;
        }
        p->n_windows = (uint32_t)(n_tokens / p->n_ctx > UINT32_MAX ? UINT32_MAX : n_tokens / p->n_ctx);
        if (prm->n_windows && prm->n_windows < p->n_windows)
            p->n_windows = prm->n_windows;
        uint64_t nt = (uint64_t)p->n_windows * p->n_ctx;
        p->tokens = malloc(nt * sizeof *p->tokens);
        if (!p->tokens) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(p->tokens, tokens, nt * sizeof *tokens);
        for (uint64_t i = 0; i < nt; i++)
            if (p->tokens[i] < 0 || (uint32_t)p->tokens[i] >= hp->n_vocab) {
                rc = rvl_seterr(RVL_EINVAL, "token id %d is outside the vocabulary", p->tokens[i]);
                goto fail;
            }
    }
    p->win = malloc((size_t)p->n_ctx * sizeof *p->win);
    p->lp = malloc((size_t)p->n_vocab * sizeof *p->lp);
    if (!p->win || !p->lp) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }

    /* logits of every position when the forward pass offers them;
     * otherwise one decode per scored position */
    p->n_batch = p->n_ctx < 256 ? p->n_ctx : 256;
    rvl_ctx_params cp = {.n_ctx = p->n_ctx, .n_threads = prm->n_threads, .all_logits = true,
                         .n_batch = p->n_batch, .kv_type = prm->kv_type};
    if (prm->kv) {
        cp.kv_type = prm->kv->kv_type;
        cp.kv_split = prm->kv->kv_split;
        cp.kv_type_k = prm->kv->kv_type_k;
        cp.kv_type_v = prm->kv->kv_type_v;
        cp.kv_hot = prm->kv->kv_hot;
        cp.kv_warm = prm->kv->kv_warm;
        cp.kv_cold = prm->kv->kv_cold;
    }
    rc = rvl_ctx_open(&p->ctx, m, &cp);
    if (rc == RVL_EUNSUPPORTED) {
        cp.all_logits = false;
        rc = rvl_ctx_open(&p->ctx, m, &cp);
    } else if (rc == 0) {
        p->batched = true;
    }
    if (rc < 0)
        goto fail;

    if (prm->save_path) {
        unsigned char h[KL_HEADER];
        memcpy(h, KL_MAGIC, 8);
        wr32(h + 8, KL_VERSION);
        wr32(h + 12, p->n_vocab);
        wr32(h + 16, p->n_ctx);
        wr32(h + 20, p->first);
        wr32(h + 24, p->n_windows);
        wr32(h + 28, (uint32_t)p->bos);
        p->xxh = XXH3_createState();
        p->save_path = strdup(prm->save_path);
        if (!p->xxh || !p->save_path || XXH3_64bits_reset(p->xxh) != XXH_OK) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = rvl_afile_open(&p->save, prm->save_path)) < 0 || (rc = save_write(p, h, sizeof h)) < 0)
            goto fail;
        for (uint64_t i = 0; i < (uint64_t)p->n_windows * p->n_ctx; i++) {
            unsigned char tb[4];
            wr32(tb, (uint32_t)p->tokens[i]);
            if ((rc = save_write(p, tb, 4)) < 0)
                goto fail;
        }
    }
    *out = p;
    return 0;
fail:
    rvl_ppl_close(p);
    return rc;
}

uint32_t rvl_ppl_n_windows(const rvl_ppl *p) { return p->n_windows; }
uint32_t rvl_ppl_n_ctx(const rvl_ppl *p) { return p->n_ctx; }
bool rvl_ppl_batched(const rvl_ppl *p) { return p->batched; }

/* Score the logits of window position j (predicting window token j+1):
 * the row index in the window's scored rows is j - first. */
static int score(rvl_ppl *p, uint32_t w, uint32_t j, const float *logits)
{
    const uint32_t target = (uint32_t)p->win[j + 1];
    const uint32_t am = log_softmax(logits, p->n_vocab, p->lp);
    const double nll = -(double)p->lp[target];
    int rc;

    p->nll += nll;
    p->nll2 += nll * nll;
    p->count++;
    if (p->save && (rc = save_write(p, p->lp, (size_t)p->n_vocab * sizeof(float))) < 0)
        return rc;
    if (p->base.base) {
        const uint64_t rows_per = p->n_ctx - 1 - p->first;
        const uint64_t off = KL_HEADER + (uint64_t)p->file_windows * p->n_ctx * 4 +
                             ((uint64_t)w * rows_per + (j - p->first)) * p->n_vocab * 4;
        const unsigned char *row = (const unsigned char *)p->base.base + off;
        double kl = 0, bmax = -INFINITY;
        uint32_t bam = 0;
        for (uint32_t i = 0; i < p->n_vocab; i++) {
            float b;
            memcpy(&b, row + 4 * (uint64_t)i, 4);
            if (isnan(b) || b > 1e-3f || b == INFINITY)
                return rvl_seterr(RVL_EFORMAT, "%s: log-probability %g at offset %llu is invalid",
                                  p->base_path, (double)b, (unsigned long long)(off + 4 * (uint64_t)i));
            if (b > bmax) {
                bmax = b;
                bam = i;
            }
            if (b != -INFINITY)
                kl += exp((double)b) * ((double)b - (double)p->lp[i]);
        }
        float bt;
        memcpy(&bt, row + 4 * (uint64_t)target, 4);
        const double bnll = -(double)bt;
        p->base_nll += bnll;
        p->base_nll2 += bnll * bnll;
        if (kl < 0)
            kl = 0; /* rounding below an exact zero */
        p->kl += kl;
        p->kl2 += kl * kl;
        if (kl > p->kl_max)
            p->kl_max = kl;
        p->same_top += bam == am;
    }
    return 0;
}

int rvl_ppl_window(rvl_ppl *p)
{
    if (p->next >= p->n_windows)
        return rvl_seterr(RVL_EINVAL, "no windows left");
    const uint32_t w = p->next, n = p->n_ctx, first = p->first;
    const float *logits;
    int rc;

    memcpy(p->win, p->tokens + (uint64_t)w * n, (size_t)n * sizeof *p->win);
    if (p->bos >= 0)
        p->win[0] = p->bos;
    rvl_ctx_reset(p->ctx);
    if (p->batched) {
        /* every position's logits, n_batch tokens per decode, all but the
         * window's last token (which nothing is scored from) */
        for (uint32_t s0 = 0; s0 + 1 < n; s0 += p->n_batch) {
            uint32_t cnt = n - 1 - s0 < p->n_batch ? n - 1 - s0 : p->n_batch;
            if ((rc = rvl_decode(p->ctx, p->win + s0, cnt, &logits)) < 0)
                return rc;
            for (uint32_t j = s0 > first ? s0 : first; j < s0 + cnt; j++)
                if ((rc = score(p, w, j, logits + (uint64_t)(j - s0) * p->n_vocab)) < 0)
                    return rc;
        }
    } else {
        /* the unscored first half in one call, then token by token */
        if ((rc = rvl_decode(p->ctx, p->win, first + 1, &logits)) < 0)
            return rc;
        for (uint32_t j = first;; j++) {
            if ((rc = score(p, w, j, logits)) < 0)
                return rc;
            if (j + 2 >= n)
                break;
            if ((rc = rvl_decode(p->ctx, &p->win[j + 1], 1, &logits)) < 0)
                return rc;
        }
    }
    p->next++;
    return 0;
}

void rvl_ppl_get_stats(const rvl_ppl *p, rvl_ppl_stats *s)
{
    memset(s, 0, sizeof *s);
    s->n_windows = p->next;
    s->count = p->count;
    if (!p->count)
        return;
    const double c = (double)p->count;
    double mean = p->nll / c, var = p->nll2 / c - mean * mean;
    s->ppl = exp(mean);
    s->ppl_err = var > 0 && c > 1 ? s->ppl * sqrt(var / (c - 1)) : 0;
    if (p->base.base) {
        s->has_base = true;
        double bm = p->base_nll / c, bv = p->base_nll2 / c - bm * bm;
        s->base_ppl = exp(bm);
        s->base_ppl_err = bv > 0 && c > 1 ? s->base_ppl * sqrt(bv / (c - 1)) : 0;
        s->kl_mean = p->kl / c;
        double kv = p->kl2 / c - s->kl_mean * s->kl_mean;
        s->kl_err = kv > 0 && c > 1 ? sqrt(kv / (c - 1)) : 0;
        s->kl_max = p->kl_max;
        s->same_top = (double)p->same_top / c;
        s->same_top_err = c > 1 ? sqrt(s->same_top * (1 - s->same_top) / (c - 1)) : 0;
    }
}

int rvl_ppl_finish(rvl_ppl *p)
{
    if (!p->save)
        return 0;
    if (p->next != p->n_windows) {
        rvl_afile_abort(p->save);
        p->save = NULL;
        return rvl_seterr(RVL_EINVAL, "%s: only %u of %u windows were scored; nothing written",
                          p->save_path, p->next, p->n_windows);
    }
    unsigned char tail[8];
    uint64_t h = XXH3_64bits_digest(p->xxh);
    wr32(tail, (uint32_t)h);
    wr32(tail + 4, (uint32_t)(h >> 32));
    int rc = rvl_afile_write(p->save, tail, 8);
    if (rc < 0) {
        rvl_afile_abort(p->save);
        p->save = NULL;
        return rc;
    }
    rc = rvl_afile_commit(p->save);
    p->save = NULL;
    return rc;
}

void rvl_ppl_close(rvl_ppl *p)
{
    if (!p)
        return;
    rvl_afile_abort(p->save);
    if (p->xxh)
        XXH3_freeState(p->xxh);
    free(p->save_path);
    rvl_map_unmap(&p->base);
    free(p->base_path);
    rvl_ctx_close(p->ctx);
    free(p->tokens);
    free(p->win);
    free(p->lp);
    free(p);
}
