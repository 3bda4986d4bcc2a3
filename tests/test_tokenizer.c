/*
 * test_tokenizer.c - the tokenizer against llama.cpp's test-tokenizer-0
 * cases, plus detokenization, special tokens and bad input.
 *
 * Data: $RVL_SHARED_DATA/tokenizers (default ../shared/data, relative to
 * the repository root where tests/run.sh runs the tests) holds llama.cpp's
 * vocab-only GGUF files with their cases: X.gguf.inp has the inputs
 * separated by "\n__ggml_vocab_test__\n", X.gguf.out the expected ids of
 * each case on one line (no BOS; tokenized with add_special = false and
 * parse_special = false, as test-tokenizer-0 does).
 *
 * Round trip: detokenize(tokenize(x)) == x holds for every case of every
 * vocabulary here. llama.cpp's own detokenizer does not always give x back:
 * it applies clean_up_tokenization_spaces for BPE vocabularies (" ," -> ",")
 * and we do not; for SentencePiece both remove the space the tokenizer put
 * in front of the text.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ruvllm.h"
#include "ruvllm_tools.h"
#include "text/tok_int.h"

static const char *const VOCABS[] = {
    "gpt-2", "llama-spm", "deepseek-coder", "falcon", "starcoder", "mpt",
};
#define N_VOCABS (sizeof VOCABS / sizeof VOCABS[0])

typedef struct {
    rvl_file *f;
    rvl_tokenizer *t;
} vocab;

static vocab g_vocab[N_VOCABS];

static const char *data_dir(void)
{
    const char *d = getenv("RVL_SHARED_DATA");
    return d && *d ? d : "../shared/data";
}

static void vocab_path(char *buf, size_t cap, const char *name, const char *ext)
{
    snprintf(buf, cap, "%s/tokenizers/ggml-vocab-%s.gguf%s", data_dir(), name, ext);
}

static const rvl_tokenizer *tok_of(const char *name)
{
    for (size_t i = 0; i < N_VOCABS; i++)
        if (strcmp(VOCABS[i], name) == 0)
            return g_vocab[i].t;
    fail_msg("no vocab %s", name);
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[1024];
        vocab_path(path, sizeof path, VOCABS[i], "");
        if (rvl_file_open(&g_vocab[i].f, path) != 0) {
            fprintf(stderr, "cannot open %s: %s\n", path, rvl_errmsg());
            return -1;
        }
        if (rvl_tok_open(&g_vocab[i].t, g_vocab[i].f) != 0) {
            fprintf(stderr, "tokenizer %s: %s\n", path, rvl_errmsg());
            return -1;
        }
    }
    /* the tokenizer copies what it needs: close the files right away */
    for (size_t i = 0; i < N_VOCABS; i++) {
        rvl_file_close(g_vocab[i].f);
        g_vocab[i].f = NULL;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_VOCABS; i++) {
        rvl_tok_close(g_vocab[i].t);
        rvl_file_close(g_vocab[i].f);
        memset(&g_vocab[i], 0, sizeof g_vocab[i]);
    }
    return 0;
}

/* Tokenize into a fresh array (caller frees). */
static int32_t *tokenize(const rvl_tokenizer *t, const char *s, size_t len,
                         bool add_special, bool parse_special, size_t *n)
{
    /* both entry points must agree */
    int32_t *alloc;
    size_t n_alloc;
    assert_int_equal(rvl_tok_encode_alloc(t, s, len, add_special, parse_special,
                                        &alloc, &n_alloc), 0);
    size_t cap = 0;
    int rc = rvl_tok_encode(t, s, len, add_special, parse_special, NULL, 0, &cap);
    assert_true(rc == 0 || rc == RVL_ERANGE);
    int32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    assert_non_null(ids);
    rc = rvl_tok_encode(t, s, len, add_special, parse_special, ids, cap, n);
    if (rc)
        fail_msg("tokenize: %s", rvl_errmsg());
    assert_int_equal(*n, n_alloc);
    assert_memory_equal(ids, alloc, n_alloc * sizeof *ids);
    free(alloc);
    return ids;
}

static char *detokenize(const rvl_tokenizer *t, const int32_t *ids, size_t n,
                        bool special, size_t *len)
{
    size_t need = 0;
    int rc = rvl_detok_ids(t, ids, n, special, NULL, 0, &need);
    assert_true(rc == 0 || rc == RVL_ERANGE);
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    rc = rvl_detok_ids(t, ids, n, special, buf, need, len);
    if (rc)
        fail_msg("detokenize: %s", rvl_errmsg());
    assert_int_equal(*len, need);
    buf[*len] = 0;
    return buf;
}

static bool valid_utf8(const char *s, size_t n)
{
    /* an independent strict decoder (Unicode table 3-7) */
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
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

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

/* ======================================================================
 * llama.cpp's cases
 * ====================================================================== */

typedef struct {
    char *inp, *out;       /* file contents */
    char **text;           /* case texts (pointers into inp, NUL-terminated) */
    size_t *text_len;
    char **expect;         /* expected id lines (into out) */
    size_t n;
} cases;

static void cases_free(cases *c)
{
    free(c->inp);
    free(c->out);
    free(c->text);
    free(c->text_len);
    free(c->expect);
}

/* test-tokenizer-0's format: split the input at "\n__ggml_vocab_test__\n"
 * (a trailing separator ends the last case), one output line per case. */
static void cases_load(cases *c, const char *name)
{
    char path[1024];
    size_t li, lo;
    memset(c, 0, sizeof *c);
    vocab_path(path, sizeof path, name, ".inp");
    c->inp = test_slurp(path, &li);
    assert_non_null(c->inp);
    vocab_path(path, sizeof path, name, ".out");
    c->out = test_slurp(path, &lo);
    assert_non_null(c->out);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t cap = 16;
    c->text = malloc(cap * sizeof *c->text);
    c->text_len = malloc(cap * sizeof *c->text_len);
    size_t pos = 0;
    while (pos < li) {
        if (c->n == cap) {
            cap *= 2;
            c->text = realloc(c->text, cap * sizeof *c->text);
            c->text_len = realloc(c->text_len, cap * sizeof *c->text_len);
        }
        char *next = strstr(c->inp + pos, sep);
        size_t end = next ? (size_t)(next - c->inp) : li;
        c->text[c->n] = c->inp + pos;
        c->text_len[c->n] = end - pos;
        c->n++;
        if (!next)
            break;
        c->inp[end] = 0;
        pos = end + sizeof sep - 1;
    }

    c->expect = malloc(c->n * sizeof *c->expect);
    size_t k = 0;
    char *p = c->out;
    while (k < c->n && p < c->out + lo) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        c->expect[k++] = p;
        p = nl ? nl + 1 : c->out + lo;
    }
    assert_int_equal(k, c->n);
}

static int32_t *parse_ids(const char *line, size_t *n)
{
    size_t cap = strlen(line) / 2 + 2, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = line;
    char *end;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        long v = strtol(p, &end, 10);
        assert_true(end != p);
        ids[k++] = (int32_t)v;
        p = end;
    }
    *n = k;
    return ids;
}

static void check_vocab_cases(const char *name)
{
    const rvl_tokenizer *t = tok_of(name);
    cases c;
    cases_load(&c, name);
    assert_true(c.n > 0);
    int failures = 0;
    for (size_t i = 0; i < c.n; i++) {
        size_t n_exp, n_got;
        int32_t *exp = parse_ids(c.expect[i], &n_exp);
        int32_t *got = tokenize(t, c.text[i], c.text_len[i], false, false, &n_got);
        if (n_exp != n_got || memcmp(exp, got, n_got * sizeof *got) != 0) {
            fprintf(stderr, "%s case %zu: '%.*s'\n", name, i, (int)c.text_len[i], c.text[i]);
            print_ids("expected", exp, n_exp);
            print_ids("got     ", got, n_got);
            failures++;
        }
        free(exp);
        free(got);
    }
    cases_free(&c);
    if (failures)
        fail_msg("%s: %d case(s) differ from llama.cpp", name, failures);
}

static void test_tokenizer_matches_llama_cpp_gpt2(void **s) { (void)s; check_vocab_cases("gpt-2"); }
static void test_tokenizer_matches_llama_cpp_llama_spm(void **s) { (void)s; check_vocab_cases("llama-spm"); }
static void test_tokenizer_matches_llama_cpp_deepseek_coder(void **s) { (void)s; check_vocab_cases("deepseek-coder"); }
static void test_tokenizer_matches_llama_cpp_falcon(void **s) { (void)s; check_vocab_cases("falcon"); }
static void test_tokenizer_matches_llama_cpp_starcoder(void **s) { (void)s; check_vocab_cases("starcoder"); }
static void test_tokenizer_matches_llama_cpp_mpt(void **s) { (void)s; check_vocab_cases("mpt"); }

/* detokenize(tokenize(x)) == x for every case of every vocabulary. */
static void test_tokenizer_round_trips_every_case(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t v = 0; v < N_VOCABS; v++) {
        const rvl_tokenizer *t = g_vocab[v].t;
        cases c;
        cases_load(&c, VOCABS[v]);
        for (size_t i = 0; i < c.n; i++) {
            size_t n, len;
            int32_t *ids = tokenize(t, c.text[i], c.text_len[i], false, false, &n);
            char *back = detokenize(t, ids, n, false, &len);
            if (len != c.text_len[i] || memcmp(back, c.text[i], len) != 0) {
                fprintf(stderr, "%s case %zu: '%.*s' came back as '%s'\n", VOCABS[v], i,
                        (int)c.text_len[i], c.text[i], back);
                failures++;
            }
            free(ids);
            free(back);
        }
        cases_free(&c);
    }
    assert_int_equal(failures, 0);
}

/* ======================================================================
 * Metadata and special tokens
 * ====================================================================== */

static void test_tokenizer_reads_special_ids_from_metadata(void **state)
{
    (void)state;
    const rvl_tokenizer *g = tok_of("gpt-2"), *l = tok_of("llama-spm"),
                        *d = tok_of("deepseek-coder");
    assert_string_equal(rvl_tok_model(g), "gpt2");
    assert_string_equal(rvl_tok_pre(g), "gpt-2");
    assert_string_equal(rvl_tok_model(l), "llama");
    assert_int_equal(rvl_tok_n_vocab(g), 50257);
    assert_int_equal(rvl_tok_bos(g), 50256);
    assert_int_equal(rvl_tok_eos(g), 50256);
    assert_int_equal(rvl_tok_bos(l), 1);
    assert_int_equal(rvl_tok_eos(l), 2);
    assert_int_equal(rvl_tok_unk(l), 0);
    assert_int_equal(rvl_tok_bos(d), 32013);
    assert_int_equal(rvl_tok_eos(d), 32014);
    /* newline: GPT-2 "\n" is 198, Llama's is the byte token <0x0A> = 13 */
    assert_int_equal(rvl_tok_nl(g), 198);
    assert_int_equal(rvl_tok_nl(l), 13);
    /* end of generation */
    assert_true(rvl_tok_is_eog(g, 50256));
    assert_false(rvl_tok_is_eog(g, 198));
    assert_true(rvl_tok_is_eog(l, 2));
    assert_false(rvl_tok_is_eog(l, 1));
    assert_true(rvl_tok_is_eog(d, 32014));
    assert_false(rvl_tok_is_eog(g, -1));
    assert_false(rvl_tok_is_eog(g, 1 << 30));
    /* types */
    assert_int_equal(rvl_tok_type(l, 0), RVL_TOK_UNKNOWN);
    assert_int_equal(rvl_tok_type(l, 1), RVL_TOK_CONTROL);
    assert_int_equal(rvl_tok_type(l, 3), RVL_TOK_BYTE);
    assert_int_equal(rvl_tok_type(l, 1000), RVL_TOK_NORMAL);
    assert_int_equal(rvl_tok_type(l, -5), 0);
    assert_true(rvl_tok_is_control(g, 50256));
    assert_false(rvl_tok_is_control(g, 198));
}

static void test_tokenizer_adds_bos_as_metadata_says(void **state)
{
    (void)state;
    size_t n;
    int32_t *ids;
    /* llama: add_bos_token true */
    assert_true(rvl_tok_add_bos(tok_of("llama-spm")));
    ids = tokenize(tok_of("llama-spm"), "Hello", 5, true, false, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 15043);
    free(ids);
    /* gpt-2 has no add_bos_token: no BOS */
    assert_false(rvl_tok_add_bos(tok_of("gpt-2")));
    ids = tokenize(tok_of("gpt-2"), "Hello", 5, true, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 15496);
    free(ids);
    /* deepseek-coder: add_bos_token true */
    ids = tokenize(tok_of("deepseek-coder"), "Hello", 5, true, false, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 32013);
    free(ids);
    /* empty text: only the BOS */
    ids = tokenize(tok_of("llama-spm"), "", 0, true, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    ids = tokenize(tok_of("llama-spm"), "", 0, false, false, &n);
    assert_int_equal(n, 0);
    free(ids);
}

static void test_tokenizer_parses_control_tokens_only_when_asked(void **state)
{
    (void)state;
    size_t n;
    int32_t *ids;
    const char *txt = "a<|endoftext|>b";
    const rvl_tokenizer *g = tok_of("gpt-2");
    ids = tokenize(g, txt, strlen(txt), false, false, &n);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(ids[i], 50256);
    free(ids);
    ids = tokenize(g, txt, strlen(txt), false, true, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    free(ids);

    /* SentencePiece: a fragment after a special token gets its own space */
    const rvl_tokenizer *l = tok_of("llama-spm");
    const char *t2 = "<s>Hello";
    ids = tokenize(l, t2, strlen(t2), false, true, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 15043); /* "▁Hello" */
    free(ids);
    ids = tokenize(l, t2, strlen(t2), false, false, &n);
    assert_true(n > 2);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(ids[i], 1);
    free(ids);
}

static void test_tokenizer_always_parses_user_defined_tokens(void **state)
{
    (void)state;
    /* mpt's vocabulary has user-defined tokens for runs of spaces: they are
     * cut out even without parse_special, as Hugging Face and llama.cpp do */
    const rvl_tokenizer *m = tok_of("mpt");
    size_t n;
    int32_t *ids = tokenize(m, "a  b", 4, false, false, &n);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= ids[i] == 50276; /* "  " */
    assert_true(found);
    free(ids);
}

static void test_tokenizer_renders_control_tokens_only_when_asked(void **state)
{
    (void)state;
    const rvl_tokenizer *g = tok_of("gpt-2");
    const char *p;
    size_t len;
    assert_int_equal(rvl_tok_piece(g, 50256, false, &p, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(rvl_tok_piece(g, 50256, true, &p, &len), 0);
    assert_int_equal(len, 13);
    assert_memory_equal(p, "<|endoftext|>", 13);
    /* Ġ is a space in GPT-2's byte mapping */
    int32_t id = rvl_tok_find(g, "\xc4\xa0Hello", 7);
    assert_int_equal(id, 18435);
    assert_int_equal(rvl_tok_piece(g, id, false, &p, &len), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(p, " Hello", 6);
    size_t tl;
    const char *tx = rvl_tok_text(g, id, &tl);
    assert_int_equal(tl, 7);
    assert_memory_equal(tx, "\xc4\xa0Hello", 7);
    assert_null(rvl_tok_text(g, -1, &tl));
    assert_int_equal(rvl_tok_find(g, "no such token at all", 20), RVL_TOK_NULL);
}

/* ======================================================================
 * Capacity, bad input
 * ====================================================================== */

static void test_tokenize_reports_needed_capacity(void **state)
{
    (void)state;
    const rvl_tokenizer *g = tok_of("gpt-2");
    int32_t ids[2];
    size_t n = 0;
    const char *txt = "Hello world, this is a test";
    assert_int_equal(rvl_tok_encode(g, txt, strlen(txt), false, false, ids, 2, &n), RVL_ERANGE);
    assert_int_equal(n, 7);
    assert_int_equal(rvl_tok_encode(g, txt, strlen(txt), false, false, NULL, 0, &n), RVL_ERANGE);
    assert_int_equal(n, 7);
    assert_int_equal(rvl_tok_encode(g, "", 0, false, false, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
}

static void test_tokenize_survives_invalid_utf8(void **state)
{
    (void)state;
    static const char bad[] = "ok \xff\xfe \xc3 \xe2\x82 x \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end\xf0\x9f";
    for (size_t v = 0; v < N_VOCABS; v++) {
        const rvl_tokenizer *t = g_vocab[v].t;
        size_t n, len;
        int32_t *ids = tokenize(t, bad, sizeof bad - 1, true, true, &n);
        assert_true(n > 0);
        char *back = detokenize(t, ids, n, false, &len);
        assert_true(valid_utf8(back, len));
        /* the valid parts survive */
        assert_non_null(strstr(back, "ok "));
        assert_non_null(strstr(back, " x "));
        assert_non_null(strstr(back, " end"));
        assert_non_null(strstr(back, "\xef\xbf\xbd"));
        free(ids);
        free(back);
    }
}

static void test_detokenize_rejects_invalid_ids(void **state)
{
    (void)state;
    const rvl_tokenizer *g = tok_of("gpt-2");
    int32_t ids[] = { 15496, -1 };
    char buf[64];
    size_t n;
    assert_int_equal(rvl_detok_ids(g, ids, 2, false, buf, sizeof buf, &n), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "out of range"));
    ids[1] = 50257;
    assert_int_equal(rvl_detok_ids(g, ids, 2, false, buf, sizeof buf, &n), RVL_EINVAL);
    const char *p;
    size_t len;
    assert_int_equal(rvl_tok_piece(g, INT32_MAX, true, &p, &len), RVL_EINVAL);
    assert_int_equal(len, 0);

    rvl_detok d;
    rvl_detok_init(&d, g, false);
    assert_int_equal(rvl_detok_push(&d, -7, buf, sizeof buf, &n), RVL_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(rvl_detok_push(&d, 15496, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "Hello", 5);
    /* too small a buffer: error, state untouched */
    assert_int_equal(rvl_detok_push(&d, 995, buf, 2, &n), RVL_ERANGE);
    assert_int_equal(n, 6);
    assert_int_equal(rvl_detok_push(&d, 995, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 6);
    assert_memory_equal(buf, " world", 6);
}

/* ======================================================================
 * Streaming detokenization
 * ====================================================================== */

static void stream_all(const rvl_tokenizer *t, const int32_t *ids, size_t n,
                       char *out, size_t *out_len, size_t *emitted_per_token)
{
    rvl_detok d;
    rvl_detok_init(&d, t, false);
    size_t bound = rvl_detok_bound(t), k = 0;
    char *buf = malloc(bound);
    for (size_t i = 0; i < n; i++) {
        size_t m;
        assert_int_equal(rvl_detok_push(&d, ids[i], buf, bound, &m), 0);
        memcpy(out + k, buf, m);
        k += m;
        if (emitted_per_token)
            emitted_per_token[i] = m;
    }
    size_t m;
    assert_int_equal(rvl_detok_flush(&d, buf, bound, &m), 0);
    memcpy(out + k, buf, m);
    k += m;
    *out_len = k;
    free(buf);
}

static void test_detok_holds_back_a_split_character(void **state)
{
    (void)state;
    /* the llama emoji is 4 UTF-8 bytes; GPT-2 splits it over 3 tokens,
     * SentencePiece into 4 byte tokens */
    static const char llama[] = "\xf0\x9f\xa6\x99";
    for (size_t v = 0; v < 2; v++) {
        const rvl_tokenizer *t = tok_of(v ? "llama-spm" : "gpt-2");
        const char *txt = v ? "\xf0\x9f\xa6\x99" : " \xf0\x9f\xa6\x99";
        size_t n;
        int32_t *ids = tokenize(t, txt, strlen(txt), false, false, &n);
        assert_true(n >= 3);
        size_t per[16], len;
        char out[64];
        stream_all(t, ids, n, out, &len, per);
        /* nothing comes out until the last byte of the character arrives */
        size_t total = 0;
        for (size_t i = 0; i + 1 < n; i++)
            total += per[i];
        assert_int_equal(total, v ? 1 : 1); /* the space only (SPM: ▁ → ' ') */
        assert_int_equal(per[n - 1], 4);
        assert_int_equal(len, 5);
        assert_memory_equal(out + 1, llama, 4);
        free(ids);
    }
}

static void test_detok_replaces_ill_formed_sequences(void **state)
{
    (void)state;
    const rvl_tokenizer *g = tok_of("gpt-2");
    rvl_detok d;
    char buf[64];
    size_t n;
    rvl_detok_init(&d, g, false);
    /* a lone continuation byte and an invalid lead byte */
    assert_int_equal(rvl_detok_push_bytes(&d, "a\x80" "b\xff", 4, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "a\xef\xbf\xbd" "b\xef\xbf\xbd", 8);
    /* a sequence broken by the next push: one U+FFFD, then the byte */
    assert_int_equal(rvl_detok_push_bytes(&d, "\xe2\x82", 2, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(rvl_detok_push_bytes(&d, "A", 1, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "\xef\xbf\xbd" "A", 4);
    /* completed across pushes: the euro sign */
    assert_int_equal(rvl_detok_push_bytes(&d, "\xe2", 1, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(rvl_detok_push_bytes(&d, "\x82", 1, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(rvl_detok_push_bytes(&d, "\xac!", 2, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "\xe2\x82\xac!", 4);
    /* surrogates and overlong forms are ill-formed */
    assert_int_equal(rvl_detok_push_bytes(&d, "\xed\xa0\x80", 3, buf, sizeof buf, &n), 0);
    assert_true(valid_utf8(buf, n));
    assert_int_equal(rvl_detok_push_bytes(&d, "\xc0\xaf", 2, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 6);
    /* left incomplete at the end: flushed as U+FFFD */
    assert_int_equal(rvl_detok_push_bytes(&d, "\xf0\x9f", 2, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(rvl_detok_flush(&d, buf, 2, &n), RVL_ERANGE);
    assert_int_equal(rvl_detok_flush(&d, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(buf, "\xef\xbf\xbd", 3);
    assert_int_equal(rvl_detok_flush(&d, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 0);
}

static void test_detok_streams_random_ids_as_valid_utf8(void **state)
{
    (void)state;
    /* byte tokens in random order make every kind of broken sequence */
    unsigned seed = 12345;
    for (size_t v = 0; v < N_VOCABS; v++) {
        const rvl_tokenizer *t = g_vocab[v].t;
        int32_t ids[200];
        int32_t nv = rvl_tok_n_vocab(t);
        for (size_t i = 0; i < 200; i++) {
            seed = seed * 1103515245u + 12345u;
            ids[i] = (int32_t)((seed >> 8) % (unsigned)(i % 2 ? 300 : nv));
        }
        size_t bound = rvl_detok_bound(t) * 201, len;
        char *out = malloc(bound);
        stream_all(t, ids, 200, out, &len, NULL);
        assert_true(valid_utf8(out, len));
        /* the whole-sequence detokenizer agrees with the stream, but for
         * the SentencePiece leading space it removes */
        size_t len2;
        char *whole = detokenize(t, ids, 200, false, &len2);
        assert_true(len2 == len || len2 + 1 == len);
        assert_memory_equal(whole, out + (len - len2), len2);
        free(whole);
        free(out);
    }
}

/* ======================================================================
 * Pre-tokenizers and unsupported files
 * ====================================================================== */

static void test_every_pretokenizer_compiles(void **state)
{
    (void)state;
    size_t n = 0;
    for (const char *name; (name = rvl_pretok_name_at(n)); n++) {
        rvl_pretok *p;
        if (rvl_pretok_open(&p, name, strlen(name)) != 0)
            fail_msg("%s: %s", name, rvl_errmsg());
        rvl_spans sp = {0};
        static const char txt[] = "Hello, y'all! 1234567 \xe6\x88\x91\xe6\x83\xb3  \n\n x";
        assert_int_equal(rvl_pretok_split(p, txt, sizeof txt - 1, &sp), 0);
        /* the words cover the text exactly, in order */
        size_t pos = 0;
        for (size_t i = 0; i < sp.n; i++) {
            assert_int_equal(sp.start[i], pos);
            assert_true(sp.len[i] > 0);
            pos += sp.len[i];
        }
        assert_int_equal(pos, sizeof txt - 1);
        rvl_pretok_spans_free(&sp);
        rvl_pretok_close(p);
    }
    assert_true(n >= 10);
    rvl_pretok *p;
    assert_int_equal(rvl_pretok_open(&p, "qwen2", 5), 0);
    assert_string_equal(rvl_pretok_get_info(p)->name, "qwen2");
    rvl_pretok_close(p);
    assert_int_equal(rvl_pretok_open(&p, "llama3", 6), 0);
    assert_true(rvl_pretok_get_info(p)->ignore_merges);
    rvl_pretok_close(p);
    assert_int_equal(rvl_pretok_open(&p, "no-such-pre", 11), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "no-such-pre"));
}

/* Splits of one text by three pre-tokenizers, as Hugging Face tokenizers
 * splits it with the same regexes. */
static void check_split(const char *pre, const char *text, const char *const *want)
{
    rvl_pretok *p;
    rvl_spans sp = {0};
    assert_int_equal(rvl_pretok_open(&p, pre, strlen(pre)), 0);
    assert_int_equal(rvl_pretok_split(p, text, strlen(text), &sp), 0);
    size_t n = 0;
    while (want[n])
        n++;
    bool same = sp.n == n;
    for (size_t i = 0; same && i < n; i++)
        same = sp.len[i] == strlen(want[i]) && memcmp(text + sp.start[i], want[i], sp.len[i]) == 0;
    if (!same) {
        fprintf(stderr, "%s split:", pre);
        for (size_t i = 0; i < sp.n; i++)
            fprintf(stderr, " [%.*s]", (int)sp.len[i], text + sp.start[i]);
        fprintf(stderr, "\n");
    }
    rvl_pretok_spans_free(&sp);
    rvl_pretok_close(p);
    assert_true(same);
}

static void test_pretokenizers_split_like_hugging_face(void **state)
{
    (void)state;
    static const char text[] = "Hello world 12345\n\n  x's I'M ok!!\n";
    static const char *const llama3[] = {
        "Hello", " world", " ", "123", "45", "\n\n", " ", " x", "'s", " I", "'M",
        " ok", "!!\n", NULL,
    };
    static const char *const qwen2[] = {
        "Hello", " world", " ", "1", "2", "3", "4", "5", "\n\n", " ", " x", "'s",
        " I", "'M", " ok", "!!\n", NULL,
    };
    static const char *const smollm[] = {
        "Hello", " world", " ", "1", "2", "3", "4", "5", "\n\n ", " x", "'s", " I",
        "'", "M", " ok", "!!", "\n", NULL,
    };
    check_split("llama-bpe", text, llama3);
    check_split("qwen2", text, qwen2);
    check_split("smollm", text, smollm);
}

/* Write a tiny vocabulary GGUF; returns its path in buf. */
static void write_vocab(char *path, size_t cap, const char *model, const char *pre,
                        size_t n_tok, bool with_types, size_t n_types)
{
    static int seq;
    snprintf(path, cap, "/tmp/rvl_test_tok_%d_%d.gguf", (int)getpid(), seq++);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, path), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "llama"), 0);
    if (model)
        assert_int_equal(rvl_gguf_writer_kv_str(w, "tokenizer.ggml.model", model), 0);
    if (pre)
        assert_int_equal(rvl_gguf_writer_kv_str(w, "tokenizer.ggml.pre", pre), 0);
    rvl_str toks[8] = {
        { "a", 1 }, { "b", 1 }, { "ab", 2 }, { "<s>", 3 }, { "</s>", 4 },
        { "c", 1 }, { "\xc4\xa0", 2 }, { "d", 1 },
    };
    if (n_tok)
        assert_int_equal(rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.tokens", toks, n_tok), 0);
    if (with_types) {
        int32_t ty[8] = { 1, 1, 1, 3, 3, 1, 1, 1 };
        assert_int_equal(rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type",
                                                RVL_GGUF_I32, ty, n_types), 0);
    }
    rvl_str merges[2] = { { "a b", 3 }, { "x y", 3 } };
    assert_int_equal(rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.merges", merges, 2), 0);
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
}

static int open_tok(const char *path, rvl_tokenizer **t)
{
    rvl_file *f;
    assert_int_equal(rvl_file_open(&f, path), 0);
    int rc = rvl_tok_open(t, f);
    rvl_file_close(f);
    unlink(path);
    return rc;
}

static void test_tokenizer_rejects_unsupported_and_malformed_vocabularies(void **state)
{
    (void)state;
    char path[256];
    rvl_tokenizer *t = NULL;

    write_vocab(path, sizeof path, "bert", NULL, 8, true, 8);
    assert_int_equal(open_tok(path, &t), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "'bert'"));
    assert_null(t);

    write_vocab(path, sizeof path, "gpt2", "no-such-pre", 8, true, 8);
    assert_int_equal(open_tok(path, &t), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "no-such-pre"));

    write_vocab(path, sizeof path, NULL, NULL, 8, true, 8);
    assert_int_equal(open_tok(path, &t), RVL_ENOTFOUND);

    write_vocab(path, sizeof path, "gpt2", "gpt-2", 0, false, 0);
    assert_int_equal(open_tok(path, &t), RVL_EFORMAT);
    assert_non_null(strstr(rvl_errmsg(), "tokenizer.ggml.tokens"));

    /* fewer token types than tokens */
    write_vocab(path, sizeof path, "gpt2", "gpt-2", 8, true, 3);
    assert_int_equal(open_tok(path, &t), RVL_EFORMAT);
    assert_non_null(strstr(rvl_errmsg(), "token_type"));

    /* a tiny valid one: merges work, the bogus merge "x y" is ignored */
    write_vocab(path, sizeof path, "gpt2", "gpt-2", 8, true, 8);
    assert_int_equal(open_tok(path, &t), 0);
    size_t n;
    int32_t ids[16];
    assert_int_equal(rvl_tok_encode(t, "ab", 2, false, false, ids, 16, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    /* bytes without a token are dropped, as llama.cpp does */
    assert_int_equal(rvl_tok_encode(t, "a zb", 4, false, false, ids, 16, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 6);
    assert_int_equal(ids[2], 1);
    /* defaults: bos/eos 11 are out of range for 8 tokens, so none */
    assert_int_equal(rvl_tok_bos(t), RVL_TOK_NULL);
    assert_int_equal(rvl_tok_eos(t), RVL_TOK_NULL);
    rvl_tok_close(t);
    rvl_tok_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_matches_llama_cpp_gpt2),
        cmocka_unit_test(test_tokenizer_matches_llama_cpp_llama_spm),
        cmocka_unit_test(test_tokenizer_matches_llama_cpp_deepseek_coder),
        cmocka_unit_test(test_tokenizer_matches_llama_cpp_falcon),
        cmocka_unit_test(test_tokenizer_matches_llama_cpp_starcoder),
        cmocka_unit_test(test_tokenizer_matches_llama_cpp_mpt),
        cmocka_unit_test(test_tokenizer_round_trips_every_case),
        cmocka_unit_test(test_tokenizer_reads_special_ids_from_metadata),
        cmocka_unit_test(test_tokenizer_adds_bos_as_metadata_says),
        cmocka_unit_test(test_tokenizer_parses_control_tokens_only_when_asked),
        cmocka_unit_test(test_tokenizer_always_parses_user_defined_tokens),
        cmocka_unit_test(test_tokenizer_renders_control_tokens_only_when_asked),
        cmocka_unit_test(test_tokenize_reports_needed_capacity),
        cmocka_unit_test(test_tokenize_survives_invalid_utf8),
        cmocka_unit_test(test_detokenize_rejects_invalid_ids),
        cmocka_unit_test(test_detok_holds_back_a_split_character),
        cmocka_unit_test(test_detok_replaces_ill_formed_sequences),
        cmocka_unit_test(test_detok_streams_random_ids_as_valid_utf8),
        cmocka_unit_test(test_every_pretokenizer_compiles),
        cmocka_unit_test(test_pretokenizers_split_like_hugging_face),
        cmocka_unit_test(test_tokenizer_rejects_unsupported_and_malformed_vocabularies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
