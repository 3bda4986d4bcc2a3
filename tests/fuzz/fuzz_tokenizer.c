/*
 * fuzz_tokenizer.c - libFuzzer harness for tokenization and detokenization
 * of arbitrary bytes.
 *
 * The vocabularies are llama.cpp's vocab-only GGUF files in
 * $RVL_SHARED_DATA/tokenizers (default ../shared/data: run from the
 * repository root), loaded once. Input layout:
 *   byte 0: bits 0-2 pick the vocabulary (mod 6), bit 3 add_special,
 *           bit 4 parse_special, bit 5 render special tokens on the way back
 *   rest:   the text
 * Checks, beyond "no crash, no leak": the detokenized text is valid UTF-8;
 * valid UTF-8 text comes back unchanged when the vocabulary has a token
 * for each of its bytes (SentencePiece: unless a special token is parsed or
 * the text has a literal U+2581, which means a space to it); the rest of
 * the input,
 * read as int32 ids (some out of range), streams to valid UTF-8 and agrees
 * with the whole-sequence detokenizer. Corpus: tests/fuzz/corpus/tokenizer/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

static const char *const VOCABS[] = {
    "gpt-2", "llama-spm", "deepseek-coder", "falcon", "starcoder", "mpt",
};
#define N_VOCABS (sizeof VOCABS / sizeof VOCABS[0])
static rvl_tokenizer *g_tok[N_VOCABS];
/* Bytes the vocabulary has a token for (byte-level: the byte's mapped
 * character; SentencePiece: <0xNN>). llama.cpp drops the others (falcon
 * has no token for some control characters), so a text containing one
 * cannot come back unchanged. */
static bool g_has_byte[N_VOCABS][256];

static void find_byte_tokens(size_t v)
{
    const rvl_tokenizer *t = g_tok[v];
    bool spm = strcmp(rvl_tok_model(t), "llama") == 0;
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        size_t len;
        if (spm) {
            len = (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
        } else {
            /* GPT-2's bytes_to_unicode */
            bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            unsigned cp = printable ? b : 256 + n++;
            if (cp < 0x80) {
                s[0] = (char)cp;
                len = 1;
            } else {
                s[0] = (char)(0xC0 | (cp >> 6));
                s[1] = (char)(0x80 | (cp & 0x3F));
                len = 2;
            }
        }
        g_has_byte[v][b] = rvl_tok_find(t, s, len) != RVL_TOK_NULL;
    }
}

static void load_all(void)
{
    const char *dir = getenv("RVL_SHARED_DATA");
    if (!dir || !*dir)
        dir = "../shared/data";
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[1024];
        rvl_file *f;
        snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-%s.gguf", dir, VOCABS[i]);
        if (rvl_file_open(&f, path) != 0 || rvl_tok_open(&g_tok[i], f) != 0) {
            fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, rvl_errmsg());
            abort();
        }
        rvl_file_close(f);
        find_byte_tokens(i);
    }
}

static bool valid_utf8(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c < 0xC2) return false;
        if (c < 0xE0) need = 1;
        else if (c < 0xF0) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c < 0xF5) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return false;
        for (size_t k = 1; k <= need; k++) {
            if (i + k >= n || p[i + k] < lo || p[i + k] > hi)
                return false;
            lo = 0x80;
            hi = 0xBF;
        }
        i += need + 1;
    }
    return true;
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", what);
        abort();
    }
}

/* Detokenize ids whole and streamed; both must be valid UTF-8 and agree.
 * Returns the whole text (caller frees) or NULL on an invalid id. */
static char *detok_both(const rvl_tokenizer *t, const int32_t *ids, size_t n,
                        bool special, size_t *len)
{
    size_t need = 0;
    int rc = rvl_detok_ids(t, ids, n, special, NULL, 0, &need);
    if (rc == RVL_EINVAL)
        return NULL;
    check(rc == 0 || rc == RVL_ERANGE, "detokenize failed");
    char *whole = malloc(need + 1);
    check(rvl_detok_ids(t, ids, n, special, whole, need, len) == 0, "detokenize refill");
    check(*len == need && valid_utf8((unsigned char *)whole, *len), "whole text not UTF-8");

    size_t bound = rvl_detok_bound(t), k = 0, m;
    char *stream = malloc(need + 8 + bound * 2), *buf = malloc(bound);
    rvl_detok d;
    rvl_detok_init(&d, t, special);
    for (size_t i = 0; i < n; i++) {
        check(rvl_detok_push(&d, ids[i], buf, bound, &m) == 0, "stream push");
        memcpy(stream + k, buf, m);
        k += m;
    }
    check(rvl_detok_flush(&d, buf, bound, &m) == 0, "stream flush");
    memcpy(stream + k, buf, m);
    k += m;
    check(valid_utf8((unsigned char *)stream, k), "stream not UTF-8");
    /* the whole-text form may only lack SentencePiece's leading space */
    check(k >= *len && k - *len <= 1 && memcmp(stream + (k - *len), whole, *len) == 0,
          "stream and whole text differ");
    free(stream);
    free(buf);
    return whole;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok[0])
        load_all();
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    size_t v = (sel & 7) % N_VOCABS;
    const rvl_tokenizer *t = g_tok[v];
    bool add_special = sel & 8, parse_special = sel & 16, render = sel & 32;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    /* exact-size copy so ASan catches reads past the text */
    char *copy = malloc(len ? len : 1);
    memcpy(copy, text, len);
    size_t n = 0;
    int rc = rvl_tok_encode(t, copy, len, add_special, parse_special, NULL, 0, &n);
    check(rc == 0 || rc == RVL_ERANGE, "tokenize (count) failed");
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t n2;
    check(rvl_tok_encode(t, copy, len, add_special, parse_special, ids, n, &n2) == 0 && n2 == n,
          "tokenize failed");
    for (size_t i = 0; i < n; i++)
        check(ids[i] >= 0 && ids[i] < rvl_tok_n_vocab(t), "token id out of range");

    size_t blen;
    char *back = detok_both(t, ids, n, parse_special, &blen);
    check(back != NULL, "own ids rejected");
    /* SentencePiece cannot give back a literal U+2581 (it means a space)
     * nor the text around a special token (it gets a space in front) */
    bool spm = strcmp(rvl_tok_model(t), "llama") == 0;
    bool spm_lossy = spm && (parse_special || memmem(copy, len, "\xe2\x96\x81", 3));
    bool all_bytes = true;
    for (size_t i = 0; i < len; i++)
        all_bytes &= g_has_byte[v][(uint8_t)copy[i]];
    if (valid_utf8((const unsigned char *)copy, len) && !add_special && !spm_lossy &&
        all_bytes) {
        check(blen == len && memcmp(back, copy, len) == 0, "round trip changed the text");
    }
    free(back);
    free(ids);

    /* the same bytes read as token ids */
    size_t nr = len / 4;
    int32_t *rid = malloc((nr ? nr : 1) * sizeof *rid);
    for (size_t i = 0; i < nr; i++) {
        uint32_t v;
        memcpy(&v, copy + 4 * i, 4);
        rid[i] = (int32_t)(v % (uint32_t)(rvl_tok_n_vocab(t) + 16)) - (v & 0x80000000u ? 8 : 0);
    }
    back = detok_both(t, rid, nr, render, &blen);
    free(back);
    free(rid);
    free(copy);
    return 0;
}
