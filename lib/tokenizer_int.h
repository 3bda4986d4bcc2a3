/*
 * tokenizer_int.h - private interface between lib/tokenizer.c (vocabulary,
 * BPE/SPM merging, special tokens, detokenization) and lib/tokenizer_pre.c
 * (the regex pre-tokenizers of byte-level BPE vocabularies). Not installed.
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

int rvl_spans_push(rvl_spans *s, size_t start, size_t len);
void rvl_spans_free(rvl_spans *s);

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

#endif
