/*
 * tok_int.h - private interface of the tokenizer's files: tokenizer.c
 * (vocabulary, special tokens, detokenization), tokenizer_encode.c (text to
 * ids) and tokenizer_pre.c (the regex pre-tokenizers of byte-level BPE
 * vocabularies). Not installed.
 */
#ifndef RVL_TOKENIZER_INT_H
#define RVL_TOKENIZER_INT_H

#include "ruvllm.h"

/* A growable list of byte ranges [start, start + len) of one text. */
typedef struct {
    size_t *start;
    size_t *len;
    size_t n, cap;
} rvl_spans;

int rvl_pretok_spans_push(rvl_spans *s, size_t start, size_t len);
void rvl_pretok_spans_free(rvl_spans *s);

/* Properties of a pre-tokenizer, selected by tokenizer.ggml.pre. */
typedef struct {
    const char *name;       /* canonical name (first alias in the table) */
    bool ignore_merges;     /* a word that is a whole token skips merging */
    bool add_bos;           /* default of add_bos_token for this family */
    bool no_bos;            /* the family has no BOS (chatglm) */
} rvl_pretok_info;

/* A compiled pre-tokenizer: an ordered list of regexes. Read-only after
 * open, so one may be shared by threads (each split call allocates its own
 * match data). */
typedef struct rvl_pretok rvl_pretok;

/* Look up `pre` (not NUL-terminated; an empty or NULL name selects
 * "default") and compile its regexes. RVL_EUNSUPPORTED for an unknown
 * name, naming it. owned: free with rvl_pretok_close. */
int rvl_pretok_open(rvl_pretok **out, const char *pre, size_t pre_len);
void rvl_pretok_close(rvl_pretok *p);
const rvl_pretok_info *rvl_pretok_get_info(const rvl_pretok *p);

/* Split text[0..len), which must be well-formed UTF-8, into words: each
 * regex in turn splits every current piece into its matches and the gaps
 * between them (gaps are kept as words too), as llama.cpp's
 * unicode_regex_split does. Appends the words to `out` in text order. */
int rvl_pretok_split(const rvl_pretok *p, const char *text, size_t len,
                     rvl_spans *out);

/* Canonical name of the i-th supported pre-tokenizer family, NULL past
 * the end (for tests: every entry must compile). */
const char *rvl_pretok_name_at(size_t i);

/* ======================================================================
 * UTF-8 helpers
 * ====================================================================== */

/* Check the UTF-8 sequence at s[0..n) (n >= 1). Returns its length when a
 * complete well-formed sequence (Unicode table 3-7) starts there. Otherwise
 * returns 0, sets *sub to the length of its maximal well-formed prefix
 * (>= 1) and *trunc to whether that prefix ran into the end of s, i.e. more
 * bytes might still complete it. */
static inline size_t rvl_utf8_check(const uint8_t *s, size_t n, size_t *sub, bool *trunc)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    *trunc = false;
    *sub = 1;
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        need = 2;
    } else if (c < 0xF0) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    } else if (c < 0xF5) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *sub = i;
            *trunc = true;
            return 0;
        }
        if (s[i] < lo || s[i] > hi) {
            *sub = i;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return need;
}

/* Decode a well-formed sequence of length len (from rvl_utf8_check). */
static inline uint32_t rvl_utf8_decode(const uint8_t *s, size_t len)
{
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

static inline size_t rvl_utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#define RVL_U8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */
#define RVL_U8_SPM_SPACE "\xE2\x96\x81"    /* U+2581, SentencePiece's space */

/* ======================================================================
 * The tokenizer object (lib/text/tok.c builds it, tokenizer_encode.c
 * reads it)
 * ====================================================================== */

/* Attribute bits (llama.cpp's token attributes, from token_type). */
enum {
    A_NORMAL = 1 << 0,
    A_UNKNOWN = 1 << 1,
    A_CONTROL = 1 << 2,
    A_USER = 1 << 3,
    A_UNUSED = 1 << 4,
    A_BYTE = 1 << 5,
};

enum { KIND_BPE = 1, KIND_SPM = 2 };

typedef struct {
    uint32_t off, len;     /* vocabulary text in t->text */
    uint32_t poff, plen;   /* decoded piece in t->piece */
    float score;
    uint8_t attr;
    uint8_t type;          /* tokenizer.ggml.token_type as stored (0: none) */
} tok_entry;

typedef struct {
    uint64_t key;          /* (left id << 32) | right id; 0 = empty slot */
    int32_t rank;
    int32_t result;
} merge_slot;

struct rvl_tokenizer {
    int kind;
    char warning[256];         /* rvl_tok_warning: what load tolerated, or "" */
    char model[16];
    char pre[64];
    rvl_pretok *pretok;        /* BPE only */
    bool ignore_merges;

    uint32_t n;                /* vocabulary size */
    tok_entry *tok;            /* [n] */
    char *text;                /* owned: all token texts */
    char *piece;               /* owned: all decoded pieces */
    size_t max_piece;

    int32_t *hslot;            /* text -> id, open addressing; -1 empty */
    size_t hmask;

    merge_slot *mslot;         /* BPE merges */
    size_t mmask;

    int32_t byte_tok[256];     /* token of a single byte (BPE: its mapped
                                  character; SPM: <0xNN>); -1 if none */
    uint8_t spm_barrier[128];  /* SPM: ASCII characters found in no token
                                  longer than one byte: they never merge,
                                  so the text is merged piecewise between
                                  them (same result, smaller heaps) */
    uint16_t b2cp[256];        /* GPT-2 byte -> code point */
    int16_t cp2b[256 + 68];    /* and back; -1 for unmapped */

    int32_t *spec;             /* special tokens, longest text first */
    uint32_t n_spec;
    uint32_t bucket[257];      /* by first byte b: spec_by_byte[bucket[b] ..
                                  bucket[b+1]) are indexes into spec */
    int32_t *spec_by_byte;

    int32_t bos, eos, eot, eom, unk, pad, nl;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix;

    int32_t *eog;              /* sorted ids that end generation */
    size_t n_eog;
};

/* Merge of the pair (l, r), or NULL (tokenizer.c). */
const merge_slot *rvl_tok_merge_find(const rvl_tokenizer *t, int32_t l, int32_t r);

#endif
