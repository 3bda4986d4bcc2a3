/*
 * tok_encode.c - text to token ids (rvl_tok_encode), on the vocabulary
 * that tokenizer.c loads. Behaviour follows llama.cpp's llama_tokenize:
 *
 *  - Special tokens (control, user-defined and unknown types) are cut out
 *    of the text first: each in turn, longest text first, at every
 *    occurrence left to right inside the text the tokens before it left.
 *    User-defined tokens are always cut out (Hugging Face treats them as
 *    "added tokens"); control and unknown tokens only when the caller asks
 *    for parse_special (ruvllm's --special).
 *  - byte-level BPE: each remaining fragment is made valid UTF-8 (every byte
 *    that does not start a well-formed sequence becomes U+FFFD, as llama.cpp
 *    does), split into words by the pre-tokenizer (tokenizer_pre.c), and
 *    each word is merged with the ranks of tokenizer.ggml.merges. Symbols
 *    start as single bytes: the GPT-2 byte-to-unicode mapping gives every
 *    byte one vocabulary character, so a word's byte-encoded form is never
 *    built; merges are looked up by (left id, right id).
 *  - SentencePiece BPE: spaces become U+2581, a space is put in front of a
 *    fragment that starts the text or follows a special token when
 *    add_space_prefix (the default for "llama"); adjacent pairs whose
 *    concatenation is a token merge, highest score first; characters
 *    without a token fall back to <0xNN> byte tokens.
 *  - Merging uses a binary heap of candidate pairs (best first, leftmost on
 *    ties) with lazy invalidation: O(n log n) in the word length.
 *
 * Deviations, on invalid text only: SentencePiece splits invalid UTF-8
 * into single bytes, which fall back to byte tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"
#include "text/tok_int.h"

#define TEXT_LIMIT ((size_t)INT32_MAX)   /* longest text we tokenize */

/* ======================================================================
 * Tokenization session: scratch buffers of one rvl_tok_encode call
 * ====================================================================== */

typedef struct {
    int32_t prev, next;    /* neighbours in the chain; -1 at the ends */
    uint32_t off, len;     /* bytes of the word; len 0 once merged away */
    int32_t id;            /* token of these bytes, -1 if none */
} sym_t;

typedef struct {
    double key;            /* higher first: SPM score, BPE -rank */
    int32_t left, right;   /* symbol indexes */
    int32_t lid, rid;      /* BPE: symbol ids when pushed */
    int32_t res;           /* token id of the merged pair */
    uint32_t size;         /* SPM: byte length of the merged pair */
} bigram;

typedef struct {
    size_t start, len;
    int32_t id;            /* -1: raw text, else a special token */
} frag;

typedef struct {
    const rvl_tokenizer *t;
    int32_t *out;
    size_t n_out, cap_out;
    sym_t *sym;
    size_t cap_sym;
    bigram *heap;
    size_t n_heap, cap_heap;
    char *buf, *wbuf;
    size_t cap_buf, cap_wbuf;
    rvl_spans words;
} sess;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    uint64_t bytes;
    if (rvl_mul_ovf(c, elem, &bytes) || bytes > SIZE_MAX)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    void *q = realloc(*p, (size_t)bytes);
    if (!q)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    *p = q;
    *cap = c;
    return 0;
}

static void sess_free(sess *s)
{
    free(s->out);
    free(s->sym);
    free(s->heap);
    free(s->buf);
    free(s->wbuf);
    rvl_pretok_spans_free(&s->words);
}

static int emit(sess *s, int32_t id)
{
    if (s->n_out == s->cap_out) {
        int rc = grow((void **)&s->out, &s->cap_out, s->n_out + 1, sizeof *s->out);
        if (rc)
            return rc;
    }
    s->out[s->n_out++] = id;
    return 0;
}

static bool bg_before(const bigram *a, const bigram *b)
{
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static int heap_push(sess *s, const bigram *b)
{
    int rc = grow((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap);
    if (rc)
        return rc;
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(b, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = *b;
    return 0;
}

static bigram heap_pop(sess *s)
{
    bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bg_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!bg_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* Link n symbols of one byte each over w[0..n) (or of one UTF-8 character
 * each when `chars`). Returns the symbol count in *ns. */
static int make_symbols(sess *s, const char *w, size_t n, bool chars, size_t *ns)
{
    int rc = grow((void **)&s->sym, &s->cap_sym, n, sizeof *s->sym);
    if (rc)
        return rc;
    size_t k = 0;
    for (size_t off = 0; off < n;) {
        size_t l = 1;
        if (chars) {
            size_t sub;
            bool trunc;
            l = rvl_utf8_check((const uint8_t *)w + off, n - off, &sub, &trunc);
            if (!l)
                l = 1;
        }
        s->sym[k] = (sym_t){ (int32_t)k - 1, (int32_t)k + 1, (uint32_t)off, (uint32_t)l, -1 };
        k++;
        off += l;
    }
    if (k)
        s->sym[k - 1].next = -1;
    *ns = k;
    return 0;
}

/* Emit a symbol: its token, or its bytes as byte tokens. */
static int emit_symbol(sess *s, const char *w, const sym_t *y)
{
    const rvl_tokenizer *t = s->t;
    if (y->id >= 0)
        return emit(s, y->id);
    for (uint32_t i = 0; i < y->len; i++) {
        int32_t id = t->byte_tok[(uint8_t)w[y->off + i]];
        if (id < 0 && t->kind == KIND_SPM)
            id = t->unk;
        if (id >= 0) {
            int rc = emit(s, id);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* ---------------- byte-level BPE ---------------- */

static int bpe_try(sess *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const merge_slot *m = rvl_tok_merge_find(s->t, s->sym[l].id, s->sym[r].id);
    if (!m)
        return 0;
    bigram b = { -(double)m->rank, l, r, s->sym[l].id, s->sym[r].id, m->result, 0 };
    return heap_push(s, &b);
}

static int bpe_word(sess *s, const char *w, size_t n)
{
    const rvl_tokenizer *t = s->t;
    int rc;
    if (n == 1) {
        int32_t id = t->byte_tok[(uint8_t)w[0]];
        return id >= 0 ? emit(s, id) : 0;
    }
    if (t->ignore_merges) {
        /* a word that is a whole token is taken as it is */
        if ((rc = grow((void **)&s->wbuf, &s->cap_wbuf, 2 * n, 1)))
            return rc;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += rvl_utf8_encode(t->b2cp[(uint8_t)w[i]], s->wbuf + k);
        int32_t id = rvl_tok_find(t, s->wbuf, k);
        if (id >= 0)
            return emit(s, id);
    }
    size_t ns;
    if ((rc = make_symbols(s, w, n, false, &ns)))
        return rc;
    for (size_t i = 0; i < ns; i++)
        s->sym[i].id = t->byte_tok[(uint8_t)w[i]];
    s->n_heap = 0;
    for (size_t i = 1; i < ns; i++)
        if ((rc = bpe_try(s, (int32_t)i - 1, (int32_t)i)))
            return rc;
    while (s->n_heap) {
        bigram b = heap_pop(s);
        sym_t *L = &s->sym[b.left], *R = &s->sym[b.right];
        if (!L->len || !R->len || L->next != b.right || L->id != b.lid || R->id != b.rid)
            continue; /* outdated: one side has merged since */
        L->len += R->len;
        L->id = b.res;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0)
            s->sym[R->next].prev = b.left;
        if ((rc = bpe_try(s, L->prev, b.left)) || (rc = bpe_try(s, b.left, L->next)))
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        if ((rc = emit_symbol(s, w, &s->sym[i])))
            return rc;
    return 0;
}

/* Replace every byte that does not start a well-formed UTF-8 sequence with
 * U+FFFD (llama.cpp's rule), into s->buf. */
static int sanitize(sess *s, const char *in, size_t n, size_t *out_len)
{
    uint64_t need;
    if (rvl_mul_ovf(n, 3, &need) || need > SIZE_MAX)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    int rc = grow((void **)&s->buf, &s->cap_buf, (size_t)need, 1);
    if (rc)
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t sub;
        bool trunc;
        size_t l = rvl_utf8_check((const uint8_t *)in + i, n - i, &sub, &trunc);
        if (l) {
            memcpy(s->buf + k, in + i, l);
            k += l;
            i += l;
        } else {
            memcpy(s->buf + k, RVL_U8_REPLACEMENT, 3);
            k += 3;
            i += 1;
        }
    }
    *out_len = k;
    return 0;
}

static int bpe_fragment(sess *s, const char *text, size_t n)
{
    size_t len = 0;
    int rc = sanitize(s, text, n, &len);
    if (rc)
        return rc;
    s->words.n = 0;
    if ((rc = rvl_pretok_split(s->t->pretok, s->buf, len, &s->words)))
        return rc;
    for (size_t i = 0; i < s->words.n; i++)
        if ((rc = bpe_word(s, s->buf + s->words.start[i], s->words.len[i])))
            return rc;
    return 0;
}

/* ---------------- SentencePiece BPE ---------------- */

static int spm_try(sess *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const sym_t *L = &s->sym[l], *R = &s->sym[r];
    size_t size = (size_t)L->len + R->len;
    int32_t id = rvl_tok_find(s->t, s->buf + L->off, size);
    if (id < 0)
        return 0;
    bigram b = { s->t->tok[id].score, l, r, -1, -1, id, (uint32_t)size };
    return heap_push(s, &b);
}

/* Merge the symbols of s->buf[off..off+n) and emit their tokens. */
static int spm_merge(sess *s, size_t off, size_t n)
{
    const rvl_tokenizer *t = s->t;
    size_t ns;
    int rc = make_symbols(s, s->buf + off, n, true, &ns);
    if (rc)
        return rc;
    for (size_t i = 0; i < ns; i++) {
        s->sym[i].off += (uint32_t)off;
        s->sym[i].id = rvl_tok_find(t, s->buf + s->sym[i].off, s->sym[i].len);
    }
    s->n_heap = 0;
    for (size_t i = 1; i < ns; i++)
        if ((rc = spm_try(s, (int32_t)i - 1, (int32_t)i)))
            return rc;
    while (s->n_heap) {
        bigram b = heap_pop(s);
        sym_t *L = &s->sym[b.left], *R = &s->sym[b.right];
        if (!L->len || !R->len || (size_t)L->len + R->len != b.size)
            continue;
        L->len += R->len;
        L->id = b.res;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0)
            s->sym[R->next].prev = b.left;
        if ((rc = spm_try(s, L->prev, b.left)) || (rc = spm_try(s, b.left, L->next)))
            return rc;
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = s->sym[i].next)
        if ((rc = emit_symbol(s, s->buf, &s->sym[i])))
            return rc;
    return 0;
}

static int spm_fragment(sess *s, const char *text, size_t n, bool prefix)
{
    const rvl_tokenizer *t = s->t;
    /* escape: spaces become U+2581, optionally one in front */
    uint64_t need;
    if (rvl_mul_ovf(n + 1, 3, &need) || need > SIZE_MAX)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    int rc = grow((void **)&s->buf, &s->cap_buf, (size_t)need, 1);
    if (rc)
        return rc;
    size_t k = 0;
    if (prefix) {
        memcpy(s->buf, RVL_U8_SPM_SPACE, 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + k, RVL_U8_SPM_SPACE, 3);
            k += 3;
        } else {
            s->buf[k++] = text[i];
        }
    }
    if (k > UINT32_MAX)
        return rvl_seterr(RVL_ERANGE, "tokenizer: text too long");

    /* merge between barrier characters, which stand alone */
    size_t start = 0;
    for (size_t i = 0; i < k; i++) {
        uint8_t c = (uint8_t)s->buf[i];
        if (c >= 0x80 || !t->spm_barrier[c])
            continue;
        if (i > start && (rc = spm_merge(s, start, i - start)))
            return rc;
        if ((rc = spm_merge(s, i, 1)))
            return rc;
        start = i + 1;
    }
    if (k > start && (rc = spm_merge(s, start, k - start)))
        return rc;
    return 0;
}

/* ---------------- special tokens ---------------- */

static bool spec_eligible(const rvl_tokenizer *t, int32_t id, bool parse_special)
{
    return parse_special || !(t->tok[id].attr & (A_CONTROL | A_UNKNOWN));
}

/* Cut special tokens out of text[0..len): for each eligible special token,
 * longest first, every occurrence left to right inside the raw fragments
 * left by the tokens before it (llama.cpp's tokenizer_st_partition).
 * Result in *frags (owned by the caller). */
static int partition(const rvl_tokenizer *t, const char *text, size_t len,
                     bool parse_special, frag **frags, size_t *n_frags)
{
    frag *a = malloc(sizeof *a), *b = NULL;
    size_t na = 1, cap_a = 1, cap_b = 0;
    bool *seen = NULL;
    int rc = 0;
    if (!a)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    a[0] = (frag){ 0, len, -1 };

    if (t->n_spec) {
        /* which special tokens occur at all: one pass over the text */
        seen = calloc(t->n_spec, sizeof *seen);
        if (!seen) {
            rc = rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
            goto done;
        }
        bool any = false;
        for (size_t i = 0; i < len; i++) {
            uint8_t c = (uint8_t)text[i];
            for (uint32_t j = t->bucket[c]; j < t->bucket[c + 1]; j++) {
                uint32_t p = (uint32_t)t->spec_by_byte[j];
                int32_t id = t->spec[p];
                const tok_entry *e = &t->tok[id];
                if (seen[p] || e->len > len - i || !spec_eligible(t, id, parse_special))
                    continue;
                if (memcmp(text + i, t->text + e->off, e->len) == 0)
                    seen[p] = any = true;
            }
        }
        for (uint32_t p = 0; any && p < t->n_spec; p++) {
            if (!seen[p])
                continue;
            int32_t id = t->spec[p];
            const char *st = t->text + t->tok[id].off;
            size_t sl = t->tok[id].len;
            size_t nb = 0;
            for (size_t i = 0; i < na; i++) {
                size_t base = a[i].start, rest = a[i].len;
                if (a[i].id >= 0) {
                    if ((rc = grow((void **)&b, &cap_b, nb + 1, sizeof *b)))
                        goto done;
                    b[nb++] = a[i];
                    continue;
                }
                while (rest) {
                    const char *m = rest >= sl ? memmem(text + base, rest, st, sl) : NULL;
                    if ((rc = grow((void **)&b, &cap_b, nb + 2, sizeof *b)))
                        goto done;
                    if (!m) {
                        b[nb++] = (frag){ base, rest, -1 };
                        break;
                    }
                    size_t at = (size_t)(m - text);
                    if (at > base)
                        b[nb++] = (frag){ base, at - base, -1 };
                    b[nb++] = (frag){ at, sl, id };
                    rest -= at - base + sl;
                    base = at + sl;
                }
            }
            frag *tmp = a;
            size_t tcap = cap_a;
            a = b;
            cap_a = cap_b;
            na = nb;
            b = tmp;
            cap_b = tcap;
        }
    }
done:
    free(seen);
    free(b);
    if (rc) {
        free(a);
        return rc;
    }
    *frags = a;
    *n_frags = na;
    return 0;
}

/* Tokenize into s->out. */
static int run_tokenize(sess *s, const char *text, size_t len,
                        bool add_special, bool parse_special)
{
    const rvl_tokenizer *t = s->t;
    frag *fr = NULL;
    size_t nf = 0;
    int rc = 0;
    if (!text && len)
        return rvl_seterr(RVL_EINVAL, "tokenize: text is NULL");
    if (len > TEXT_LIMIT)
        return rvl_seterr(RVL_ERANGE, "tokenize: text of %zu bytes is too long (the"
                          " limit is %zu)", len, TEXT_LIMIT);

    if (add_special && t->add_bos && (rc = emit(s, t->bos)))
        goto done;
    if (len && (rc = partition(t, text, len, parse_special, &fr, &nf)))
        goto done;
    bool prev_special = true; /* SPM: the first fragment gets a space */
    for (size_t i = 0; i < nf; i++) {
        if (fr[i].id >= 0) {
            rc = emit(s, fr[i].id);
            prev_special = true;
        } else if (t->kind == KIND_SPM) {
            rc = spm_fragment(s, text + fr[i].start, fr[i].len,
                              t->add_space_prefix && prev_special);
            prev_special = false;
        } else {
            rc = bpe_fragment(s, text + fr[i].start, fr[i].len);
        }
        if (rc)
            goto done;
    }
    if (add_special && t->add_eos)
        rc = emit(s, t->eos);
done:
    free(fr);
    return rc;
}

int rvl_tok_encode(const rvl_tokenizer *t, const char *text, size_t len,
                 bool add_special, bool parse_special,
                 int32_t *ids, size_t cap, size_t *n_out)
{
    sess s = { .t = t };
    *n_out = 0;
    int rc = run_tokenize(&s, text, len, add_special, parse_special);
    if (rc == 0) {
        *n_out = s.n_out;
        if (s.n_out > cap)
            rc = rvl_seterr(RVL_ERANGE, "tokenize: %zu tokens do not fit in %zu",
                            s.n_out, cap);
        else if (s.n_out)
            memcpy(ids, s.out, s.n_out * sizeof *ids);
    }
    sess_free(&s);
    return rc;
}

int rvl_tok_encode_alloc(const rvl_tokenizer *t, const char *text, size_t len,
                       bool add_special, bool parse_special,
                       int32_t **ids, size_t *n_out)
{
    sess s = { .t = t };
    *ids = NULL;
    *n_out = 0;
    int rc = run_tokenize(&s, text, len, add_special, parse_special);
    if (rc == 0) {
        if (!s.out && !(s.out = malloc(sizeof *s.out)))
            rc = rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
        else {
            *ids = s.out;
            *n_out = s.n_out;
            s.out = NULL;
        }
    }
    sess_free(&s);
    return rc;
}
