/*
 * detok.c - the detokenizer (rvl_detok_*): token ids back to text, whole
 * sequences (rvl_detok_ids) and a stream that holds back incomplete UTF-8
 * (rvl_detok_init/push/flush), as llama.cpp's token_to_piece renders them.
 */
#include <string.h>

#include "text/tok_int.h"

/* ======================================================================
 * Detokenization
 * ====================================================================== */

/* Counting writer: writes while it fits, always advances *pos. */
static void put(char *out, size_t cap, size_t *pos, const void *p, size_t n)
{
    if (out && *pos + n <= cap)
        memcpy(out + *pos, p, n);
    *pos += n;
}

/* Feed bytes through the UTF-8 state `pend` (an incomplete but so far
 * well-formed sequence, at most 3 bytes): complete characters go out,
 * ill-formed input becomes U+FFFD per maximal subpart, and an incomplete
 * tail is held back in pend. */
static void feed(uint8_t *pend, uint8_t *n_pend, const char *in, size_t n,
                 char *out, size_t cap, size_t *pos)
{
    size_t total = *n_pend + n, i = 0;
    uint8_t p0[4];
    memcpy(p0, pend, *n_pend);
    size_t np0 = *n_pend;
#define AT(j) ((j) < np0 ? p0[j] : (uint8_t)in[(j) - np0])
    *n_pend = 0;
    while (i < total) {
        uint8_t tmp[4];
        size_t k = total - i < 4 ? total - i : 4;
        for (size_t j = 0; j < k; j++)
            tmp[j] = AT(i + j);
        size_t sub;
        bool trunc;
        size_t l = rvl_utf8_check(tmp, k, &sub, &trunc);
        if (l) {
            put(out, cap, pos, tmp, l);
            i += l;
        } else if (trunc) {
            memcpy(pend, tmp, k); /* k < 4: hold back until it completes */
            *n_pend = (uint8_t)k;
            break;
        } else {
            put(out, cap, pos, RVL_U8_REPLACEMENT, 3);
            i += sub;
        }
    }
#undef AT
}

void rvl_detok_init(rvl_detok *d, const rvl_tokenizer *t, bool special)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->special = special;
}

size_t rvl_detok_bound(const rvl_tokenizer *t)
{
    return 3 * (t->max_piece + 4);
}

int rvl_detok_push_bytes(rvl_detok *d, const char *bytes, size_t n,
                         char *buf, size_t cap, size_t *n_out)
{
    uint8_t pend[4];
    uint8_t np = d->n_pend;
    size_t pos = 0;
    memcpy(pend, d->pend, sizeof pend);
    feed(pend, &np, bytes, n, NULL, 0, &pos); /* dry run: size */
    *n_out = pos;
    if (pos > cap)
        return rvl_seterr(RVL_ERANGE, "detokenize: %zu bytes do not fit in %zu", pos, cap);
    pos = 0;
    feed(d->pend, &d->n_pend, bytes, n, buf, cap, &pos);
    return 0;
}

int rvl_detok_push(rvl_detok *d, int32_t id, char *buf, size_t cap, size_t *n_out)
{
    const char *p;
    size_t n;
    *n_out = 0;
    int rc = rvl_tok_piece(d->tok, id, d->special, &p, &n);
    if (rc)
        return rc;
    return rvl_detok_push_bytes(d, p, n, buf, cap, n_out);
}

int rvl_detok_flush(rvl_detok *d, char *buf, size_t cap, size_t *n_out)
{
    *n_out = d->n_pend ? 3 : 0;
    if (*n_out > cap)
        return rvl_seterr(RVL_ERANGE, "detokenize: 3 bytes do not fit in %zu", cap);
    if (d->n_pend)
        memcpy(buf, RVL_U8_REPLACEMENT, 3);
    d->n_pend = 0;
    return 0;
}

int rvl_detok_ids(const rvl_tokenizer *t, const int32_t *ids, size_t n, bool special,
                   char *buf, size_t cap, size_t *n_out)
{
    uint8_t pend[4];
    uint8_t np = 0;
    size_t pos = 0;
    *n_out = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t len;
        int rc = rvl_tok_piece(t, ids[i], special, &p, &len);
        if (rc)
            return rvl_preerr(rc, "detokenize: token %zu", i);
        /* SPM adds a space in front of the text: take it away again */
        if (i == 0 && t->add_space_prefix && len && p[0] == ' ') {
            p++;
            len--;
        }
        feed(pend, &np, p, len, buf, cap, &pos);
    }
    if (np)
        put(buf, cap, &pos, RVL_U8_REPLACEMENT, 3);
    *n_out = pos;
    if (pos > cap)
        return rvl_seterr(RVL_ERANGE, "detokenize: %zu bytes do not fit in %zu", pos, cap);
    return 0;
}
