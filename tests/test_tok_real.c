/*
 * test_tok_real.c - the tokenizers of real models against llama.cpp.
 *
 * Goldens: tests/ref/tok/NAME.{inp,out,special.out,detok,special.detok},
 * made by tests/ref/gen_tok_goldens.py with llama.cpp (llama-cpp-python
 * 0.3.36, vocab_only) from the model files `make model` fetches into
 * ${XDG_CACHE_HOME:-~/.cache}/ruvllm/models/: Gemma 3 270M (SentencePiece,
 * 262,144 tokens, byte fallback, user-defined tokens for runs of
 * whitespace and HTML tags) and SmolLM2-135M (byte-level BPE). The cases
 * are every string of the shared tokenizer tests plus strings aimed at
 * these vocabularies (see the script). A missing model file skips its
 * tests (cmocka skip()).
 *
 * Each case is tokenized as `ruvllm run` does (BOS as the model says)
 * with and without parse_special, and the ids without the BOS are
 * detokenized back: the text must be llama.cpp's detokenization (which is
 * the case itself except where the script's .versions file says).
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
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "ruvllm.h"

#define REF_DIR "tests/ref/tok"

/* The cases of an .inp/.detok file: pieces separated by SEP, each followed
 * by one (the generator always ends with one). Pointers into buf. */
typedef struct {
    char *buf;
    char *s[512];
    size_t len[512];
    size_t n;
} pieces;

static void pieces_load(pieces *p, const char *path)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t total;
    memset(p, 0, sizeof *p);
    p->buf = test_slurp(path, &total);
    if (!p->buf)
        fail_msg("cannot read %s", path);
    size_t pos = 0;
    while (pos < total) {
        char *next = memmem(p->buf + pos, total - pos, sep, sizeof sep - 1);
        assert_non_null(next);
        assert_true(p->n < 512);
        p->s[p->n] = p->buf + pos;
        p->len[p->n] = (size_t)(next - (p->buf + pos));
        p->n++;
        pos = (size_t)(next - p->buf) + sizeof sep - 1;
    }
}

/* One line of ids per case. */
typedef struct {
    char *buf;
    int32_t *ids[512];
    size_t n_ids[512];
    size_t n;
} idlines;

static void idlines_load(idlines *l, const char *path)
{
    size_t total;
    memset(l, 0, sizeof *l);
    l->buf = test_slurp(path, &total);
    if (!l->buf)
        fail_msg("cannot read %s", path);
    char *p = l->buf;
    while (*p) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        *nl = 0;
        assert_true(l->n < 512);
        int32_t *ids = malloc((strlen(p) / 2 + 2) * sizeof *ids);
        size_t k = 0;
        for (char *q = p, *end; *q;) {
            long v = strtol(q, &end, 10);
            assert_true(end != q);
            ids[k++] = (int32_t)v;
            q = end;
            while (*q == ' ')
                q++;
        }
        l->ids[l->n] = ids;
        l->n_ids[l->n] = k;
        l->n++;
        p = nl + 1;
    }
}

static void idlines_free(idlines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->ids[i]);
    free(l->buf);
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Open the tokenizer of models/FILE, or NULL when the file is absent. */
static rvl_tokenizer *open_model_tok(const char *file)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char path[4096];
    if (xdg && *xdg)
        snprintf(path, sizeof path, "%s/ruvllm/models/%s", xdg, file);
    else
        snprintf(path, sizeof path, "%s/.cache/ruvllm/models/%s", home ? home : ".", file);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        fprintf(stderr, "%s missing (make model): skipped\n", path);
        return NULL;
    }
    fclose(probe);
    double t0 = now_s();
    rvl_file *f = NULL;
    rvl_tokenizer *t = NULL;
    if (rvl_file_open(&f, path) != 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    if (rvl_tok_open(&t, f) != 0)
        fail_msg("%s: tokenizer: %s", path, rvl_errmsg());
    rvl_file_close(f);
    fprintf(stderr, "%s: %d tokens, tokenizer loaded in %.1f ms\n", file,
            (int)rvl_tok_n_vocab(t), 1e3 * (now_s() - t0));
    return t;
}

/* ids of text as the CLI makes them */
static int32_t *encode(const rvl_tokenizer *t, const char *s, size_t len, bool special, size_t *n)
{
    int32_t *ids = NULL;
    if (rvl_tok_encode_alloc(t, s, len, true, special, &ids, n) != 0)
        fail_msg("tokenize: %s", rvl_errmsg());
    return ids;
}

/* Compare the model's tokenizer with every golden of NAME; returns the
 * number of differing cases. */
static int check_model(const rvl_tokenizer *t, const char *name, bool special)
{
    char path[512];
    pieces in, detok;
    idlines want;
    snprintf(path, sizeof path, REF_DIR "/%s.inp", name);
    pieces_load(&in, path);
    snprintf(path, sizeof path, REF_DIR "/%s%s.out", name, special ? ".special" : "");
    idlines_load(&want, path);
    snprintf(path, sizeof path, REF_DIR "/%s%s.detok", name, special ? ".special" : "");
    pieces_load(&detok, path);
    assert_int_equal(in.n, want.n);
    assert_int_equal(in.n, detok.n);
    assert_true(in.n >= 100);

    int bad = 0, bad_detok = 0;
    int32_t bos = rvl_tok_bos(t);
    for (size_t i = 0; i < in.n; i++) {
        size_t n;
        int32_t *ids = encode(t, in.s[i], in.len[i], special, &n);
        if (n != want.n_ids[i] || memcmp(ids, want.ids[i], n * sizeof *ids) != 0) {
            fprintf(stderr, "%s%s case %zu: '%.*s'\n", name, special ? " (special)" : "", i,
                    (int)in.len[i], in.s[i]);
            print_ids("llama.cpp", want.ids[i], want.n_ids[i]);
            print_ids("ruvllm   ", ids, n);
            bad++;
        }
        /* back to text, without a leading BOS (the script drops it too,
         * also one the case wrote itself) */
        size_t skip = n > 0 && ids[0] == bos ? 1 : 0, len = 0, need = 0;
        int rc = rvl_detok_ids(t, ids + skip, n - skip, special, NULL, 0, &need);
        assert_true(rc == 0 || rc == RVL_ERANGE);
        char *text = malloc(need + 1);
        assert_int_equal(rvl_detok_ids(t, ids + skip, n - skip, special, text, need, &len), 0);
        if (len != detok.len[i] || memcmp(text, detok.s[i], len) != 0) {
            fprintf(stderr, "%s%s case %zu: detokenized '%.*s', llama.cpp '%.*s'\n", name,
                    special ? " (special)" : "", i, (int)len, text, (int)detok.len[i],
                    detok.s[i]);
            bad_detok++;
        }
        free(text);
        free(ids);
    }
    fprintf(stderr, "%s%s: %zu cases, %d ids differ, %d texts differ\n", name,
            special ? " (special)" : "", in.n, bad, bad_detok);
    free(in.buf);
    free(detok.buf);
    idlines_free(&want);
    return bad + bad_detok;
}

static void check_named(const char *name, const char *file)
{
    rvl_tokenizer *t = open_model_tok(file);
    if (!t) {
        skip();
        return;
    }
    int bad = check_model(t, name, false) + check_model(t, name, true);
    rvl_tok_close(t);
    assert_int_equal(bad, 0);
}

/* The vocabulary-only GGUF tests/ref/tok/NAME.vocab.gguf.zst (made by
 * llama.cpp's converter: tests/ref/gen_tok_vocab19.py), decompressed to a
 * temporary file for rvl_file_open. Always present: never skipped. */
static rvl_tokenizer *open_ref_vocab(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, REF_DIR "/%s.vocab.gguf.zst", name);
    size_t zlen;
    char *z = test_slurp(path, &zlen);
    if (!z)
        fail_msg("cannot read %s", path);
    unsigned long long n = ZSTD_getFrameContentSize(z, zlen);
    assert_true(n != ZSTD_CONTENTSIZE_ERROR && n != ZSTD_CONTENTSIZE_UNKNOWN && n < (1ull << 30));
    char *raw = malloc(n);
    assert_non_null(raw);
    assert_int_equal(ZSTD_decompress(raw, n, z, zlen), n);
    free(z);
    char tmp[] = "/tmp/rvl_vocab_XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, raw, n), (ssize_t)n);
    close(fd);
    free(raw);
    rvl_file *f = NULL;
    rvl_tokenizer *t = NULL;
    if (rvl_file_open(&f, tmp) != 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    if (rvl_tok_open(&t, f) != 0)
        fail_msg("%s: tokenizer: %s", path, rvl_errmsg());
    rvl_file_close(f);
    unlink(tmp);
    return t;
}

static void check_ref_vocab(const char *name)
{
    rvl_tokenizer *t = open_ref_vocab(name);
    int bad = check_model(t, name, false) + check_model(t, name, true);
    rvl_tok_close(t);
    assert_int_equal(bad, 0);
}

/* gpt-oss's o200k_harmony (pre-tokenizer gpt-4o) and DeepSeek-V3's 128k
 * vocabulary (deepseek-v3): ids and text as llama.cpp's */
static void test_gpt_oss_tokenizes_like_llama_cpp(void **s)
{
    (void)s;
    check_ref_vocab("gpt-oss");
}

static void test_deepseek_v3_tokenizes_like_llama_cpp(void **s)
{
    (void)s;
    check_ref_vocab("deepseek-v3");
}

static int32_t find(const rvl_tokenizer *t, const char *text)
{
    return rvl_tok_find(t, text, strlen(text));
}

/* harmony's tokens: control tokens; the reply ends at <|return|> or
 * <|call|> (and <|endoftext|>), not at <|end|>, which only closes a
 * message (llama.cpp: EOG minus <|end|> when <|return|> and <|call|> are
 * there; <|end|> then renders as text) */
static void test_gpt_oss_special_tokens(void **s)
{
    (void)s;
    rvl_tokenizer *t = open_ref_vocab("gpt-oss");
    assert_int_equal(rvl_tok_n_vocab(t), 201088);
    assert_string_equal(rvl_tok_model(t), "gpt2");
    assert_false(rvl_tok_add_bos(t));
    assert_int_equal(find(t, "<|startoftext|>"), 199998);
    assert_int_equal(find(t, "<|return|>"), 200002);
    assert_int_equal(find(t, "<|channel|>"), 200005);
    assert_int_equal(find(t, "<|end|>"), 200007);
    assert_int_equal(find(t, "<|call|>"), 200012);
    assert_true(rvl_tok_is_eog(t, 200002));
    assert_true(rvl_tok_is_eog(t, 200012));
    assert_true(rvl_tok_is_eog(t, 199999));   /* <|endoftext|> */
    assert_false(rvl_tok_is_eog(t, 200007));
    assert_false(rvl_tok_is_eog(t, 200005));
    /* and nothing else: llama.cpp's llama_vocab_is_eog on this file is true
     * for exactly 199999, 200002 and 200012 */
    int n_eog = 0;
    for (int32_t id = 0; id < rvl_tok_n_vocab(t); id++)
        n_eog += rvl_tok_is_eog(t, id);
    assert_int_equal(n_eog, 3);
    /* llama.cpp makes the message markers (and <|end|>) user-defined:
     * parsed and rendered always, so a reply's channels show in its text */
    static const char *const user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"};
    for (size_t i = 0; i < sizeof user / sizeof *user; i++) {
        int32_t id = find(t, user[i]);
        assert_int_equal(rvl_tok_type(t, id), RVL_TOK_USER_DEFINED);
        const char *p;
        size_t len;
        assert_int_equal(rvl_tok_piece(t, id, false, &p, &len), 0);
        assert_int_equal(len, strlen(user[i]));
        assert_memory_equal(p, user[i], len);
    }
    assert_int_equal(rvl_tok_type(t, 200002), RVL_TOK_CONTROL);   /* <|return|> */
    rvl_tok_close(t);
}

static void test_deepseek_v3_special_tokens(void **s)
{
    (void)s;
    rvl_tokenizer *t = open_ref_vocab("deepseek-v3");
    assert_int_equal(rvl_tok_n_vocab(t), 129280);
    assert_int_equal(rvl_tok_bos(t), 0);
    assert_int_equal(rvl_tok_eos(t), 1);
    assert_true(rvl_tok_is_eog(t, 1));
    int32_t user = find(t, "<\xef\xbd\x9cUser\xef\xbd\x9c>");
    assert_true(user > 0);
    assert_false(rvl_tok_is_eog(t, user));
    rvl_tok_close(t);
}

static void test_gemma3_tokenizes_like_llama_cpp(void **s)
{
    (void)s;
    check_named("gemma3", "gemma-3-270m-q4_k_m.gguf");
}

static void test_smollm2_tokenizes_like_llama_cpp(void **s)
{
    (void)s;
    check_named("smollm2", RVL_DEFAULT_MODEL_FILE);
}

/* Gemma's special tokens: the turn markers are control tokens (parsed
 * only with --special, rendered only when asked), the whitespace runs and
 * HTML tags user-defined ones (always parsed, always rendered). */
static void test_gemma3_special_tokens(void **s)
{
    (void)s;
    rvl_tokenizer *t = open_model_tok("gemma-3-270m-q4_k_m.gguf");
    if (!t) {
        skip();
        return;
    }
    assert_int_equal(rvl_tok_n_vocab(t), 262144);
    assert_string_equal(rvl_tok_model(t), "llama");
    assert_int_equal(rvl_tok_bos(t), 2);
    assert_int_equal(rvl_tok_eos(t), 1);
    assert_true(rvl_tok_add_bos(t));
    int32_t sot = rvl_tok_find(t, "<start_of_turn>", 15), eot = rvl_tok_find(t, "<end_of_turn>", 13);
    assert_int_equal(sot, 105);
    assert_int_equal(eot, 106);
    assert_int_equal(rvl_tok_type(t, sot), RVL_TOK_CONTROL);
    assert_true(rvl_tok_is_eog(t, eot));   /* chat turns end at <end_of_turn> */
    assert_true(rvl_tok_is_eog(t, 1));
    assert_false(rvl_tok_is_eog(t, sot));
    assert_int_equal(rvl_tok_type(t, rvl_tok_find(t, "<h1>", 4)), RVL_TOK_USER_DEFINED);
    assert_int_equal(rvl_tok_nl(t), 248);  /* <0x0A>, as llama.cpp picks it (not "\n", 107) */
    const char *p;
    size_t len;
    assert_int_equal(rvl_tok_piece(t, sot, false, &p, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(rvl_tok_piece(t, 138, false, &p, &len), 0);   /* "  " */
    assert_int_equal(len, 2);
    assert_memory_equal(p, "  ", 2);
    assert_int_equal(rvl_tok_piece(t, 238 + 0xF0, false, &p, &len), 0); /* <0xF0> */
    assert_int_equal(len, 1);
    assert_int_equal((uint8_t)p[0], 0xF0);
    rvl_tok_close(t);
}

/* ======================================================================
 * Added tokens across every vocabulary we have
 * ====================================================================== */

static rvl_tokenizer *open_tok_file(const char *path)
{
    rvl_file *f = NULL;
    rvl_tokenizer *t = NULL;
    if (rvl_file_open(&f, path) != 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    if (rvl_tok_open(&t, f) != 0)
        fail_msg("%s: tokenizer: %s", path, rvl_errmsg());
    rvl_file_close(f);
    return t;
}

/* Every added token written alone in a text: a user-defined one comes back
 * as itself without parse_special (llama.cpp's tokenizer_st_partition
 * skips only CONTROL and UNKNOWN tokens when special parsing is off); a
 * control one only with parse_special, and never without it. Counts what
 * it checked into *n_user, *n_control. */
static int check_added_tokens(const rvl_tokenizer *t, const char *what, size_t *n_user,
                              size_t *n_control)
{
    int bad = 0;
    for (int32_t id = 0; id < rvl_tok_n_vocab(t); id++) {
        int type = rvl_tok_type(t, id);
        if (type != RVL_TOK_USER_DEFINED && type != RVL_TOK_CONTROL)
            continue;
        size_t len, n;
        const char *text = rvl_tok_text(t, id, &len);
        /* an empty text cannot be written; a duplicate text is its first id */
        if (!len || rvl_tok_find(t, text, len) != id)
            continue;
        int32_t *ids = NULL;
        for (int special = 0; special < 2; special++) {
            if (rvl_tok_encode_alloc(t, text, len, false, special, &ids, &n) != 0)
                fail_msg("%s: %s", what, rvl_errmsg());
            bool alone = n == 1 && ids[0] == id, found = false;
            for (size_t i = 0; i < n; i++)
                found |= ids[i] == id;
            bool ok = type == RVL_TOK_USER_DEFINED ? alone
                    : special ? alone : !found;
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s: %s token %d '%.*s' %s parse_special: %zu ids, first %d\n",
                        what, type == RVL_TOK_CONTROL ? "control" : "user-defined", (int)id,
                        (int)len, text, special ? "with" : "without", n, n ? (int)ids[0] : -1);
            free(ids);
        }
        if (type == RVL_TOK_USER_DEFINED)
            ++*n_user;
        else
            ++*n_control;
    }
    return bad;
}

static void test_user_defined_tokens_match_without_special_in_every_vocabulary(void **s)
{
    (void)s;
    static const char *const shared[] = {
        "gpt-2", "llama-spm", "deepseek-coder", "falcon", "starcoder", "mpt",
    };
    static const char *const tiny[] = {
        "llama", "llama3", "qwen2", "qwen3", "llama-tied",
    };
    static const char *const models[] = {
        RVL_DEFAULT_MODEL_FILE, "gemma-3-270m-q4_k_m.gguf",
    };
    const char *d = getenv("RVL_SHARED_DATA");
    char path[4096];
    size_t n_user = 0, n_control = 0, n_vocab = 0;
    int bad = 0;
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-%s.gguf",
                 d && *d ? d : "../shared/data", shared[i]);
        rvl_tokenizer *t = open_tok_file(path);
        bad += check_added_tokens(t, shared[i], &n_user, &n_control);
        rvl_tok_close(t);
        n_vocab++;
    }
    for (size_t i = 0; i < sizeof tiny / sizeof *tiny; i++) {
        snprintf(path, sizeof path, "tests/data/tiny/%s.gguf", tiny[i]);
        rvl_tokenizer *t = open_tok_file(path);
        bad += check_added_tokens(t, tiny[i], &n_user, &n_control);
        rvl_tok_close(t);
        n_vocab++;
    }
    static const char *const refs[] = {"gpt-oss", "deepseek-v3"};
    for (size_t i = 0; i < sizeof refs / sizeof *refs; i++) {
        rvl_tokenizer *t = open_ref_vocab(refs[i]);
        bad += check_added_tokens(t, refs[i], &n_user, &n_control);
        rvl_tok_close(t);
        n_vocab++;
    }
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        rvl_tokenizer *t = open_model_tok(models[i]);
        if (!t)
            continue;   /* the model tests above skip */
        bad += check_added_tokens(t, models[i], &n_user, &n_control);
        rvl_tok_close(t);
        n_vocab++;
    }
    fprintf(stderr, "%zu vocabularies: %zu user-defined and %zu control tokens, %d wrong\n",
            n_vocab, n_user, n_control, bad);
    /* mpt's 178 and deepseek-coder's 254 user-defined tokens at least */
    assert_true(n_user >= 400);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_tokenizes_like_llama_cpp),
        cmocka_unit_test(test_gemma3_special_tokens),
        cmocka_unit_test(test_smollm2_tokenizes_like_llama_cpp),
        cmocka_unit_test(test_gpt_oss_tokenizes_like_llama_cpp),
        cmocka_unit_test(test_gpt_oss_special_tokens),
        cmocka_unit_test(test_deepseek_v3_tokenizes_like_llama_cpp),
        cmocka_unit_test(test_deepseek_v3_special_tokens),
        cmocka_unit_test(test_user_defined_tokens_match_without_special_in_every_vocabulary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
