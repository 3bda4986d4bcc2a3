/*
 * pretok.c - the pre-tokenizers of byte-level BPE vocabularies.
 *
 * A GGUF vocabulary names its pre-tokenizer in tokenizer.ggml.pre ("gpt-2",
 * "llama-bpe", "qwen2", "smollm", ...). Each name maps to an ordered list of
 * regexes (the facts come from the models' Hugging Face tokenizer.json and
 * llama.cpp's llama-vocab.cpp). The text is split by the first regex into
 * its matches and the gaps between them; every resulting piece is split
 * again by the next regex, and so on. Gaps are kept as words, as llama.cpp
 * does, so no byte of the input is ever dropped.
 *
 * The regexes run on PCRE2 in UTF + UCP mode, which gives \p{L}, \p{N},
 * \p{P}, \s ... their Unicode meaning and supports the lookahead in
 * \s+(?!\S) natively. Where llama.cpp rewrote a Hugging Face regex for
 * std::regex (case-insensitive contractions written as '[sS] ...), the
 * rewritten form is used, as it is what llama.cpp's outputs follow.
 * Each piece is matched as its own subject: lookarounds never see past it,
 * and $ means the end of the piece (PCRE2_DOLLAR_ENDONLY).
 */
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_int.h"

/* ======================================================================
 * Regexes
 * ====================================================================== */

/* GPT-2 (also used inside several other lists). */
#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

/* Contractions, case-insensitive spelled out (llama.cpp's form). */
#define RX_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

#define RX_LLAMA3 RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RX_QWEN2 RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RX_SEED_CODER RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}" \
    "| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RX_BAILING "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])" \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"

/* GPT-4o / Llama 4 / Tekken: upper/lower-case aware words. PCRE2 knows
 * Lu/Ll/Lt/Lm/Lo, so the Hugging Face form is used directly (Tekken). */
#define RX_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RX_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
/* gpt-4o (gpt-oss's o200k_harmony, Llama 4): llama.cpp's form, not the
 * tokenizer.json's: "upper" is a letter other than a-z, "lower" a letter
 * other than A-Z, and combining marks (\p{M}) are no letters, so they end
 * a word (Hugging Face keeps them in it: Devanagari and Khmer split
 * differently). Checked on o200k_harmony against llama.cpp
 * (tests/ref/tok/gpt-oss.*). */
#define RX_LC_UPPER "(?:(?=\\p{L})[^a-z])"
#define RX_LC_LOWER "(?:(?=\\p{L})[^A-Z])"
#define RX_GPT4O \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_LC_UPPER "*" RX_LC_LOWER "+" RX_CONTR "?" \
    "|[^\\r\\n\\p{L}\\p{N}]?" RX_LC_UPPER "+" RX_LC_LOWER "*" RX_CONTR "?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_TEKKEN \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER "*" RX_LOWER "+" \
    "|[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER "+" RX_LOWER "*" \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* CJK ideographs, the 0x800.. block up to them, and Hangul syllables. */
#define RX_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* deepseek-llm: cased letters (the L& ranges of its tokenizer.json). */
#define RX_DEEPSEEK_LETTERS "\\s?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}" \
    "\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}" \
    "\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}" \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}" \
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}" \
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}" \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}" \
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}" \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}" \
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}" \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}" \
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}" \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}" \
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}" \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}" \
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}" \
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}" \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
#define RX_DEEPSEEK_PUNCT "\\s?[\\x{21}-\\x{2F}\\x{3A}-\\x{7E}\\x{FF01}-\\x{FF0F}" \
    "\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"

#define RX_DEEPSEEK3 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" \
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* BLOOM / Poro: everything up to whitespace or sentence punctuation. */
#define RX_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

#define MAX_RX 6

typedef struct {
    const char *name;           /* canonical name */
    const char *aliases;        /* space-separated tokenizer.ggml.pre values */
    const char *rx[MAX_RX];     /* applied in order; NULL-terminated */
    bool ignore_merges;
    bool add_bos;
    bool no_bos;
} pre_def;

static const pre_def pre_table[] = {
    { "default", "default",
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" },
      false, false, false },
    { "gpt-2", "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum "
      "modern-bert jina-v1-en jina-v2-code roberta-bpe exaone4 mpt olmo jais "
      "trillion granite-docling",
      { RX_GPT2 }, false, false, false },
    { "llama-bpe", "llama-bpe llama3 llama-v3 falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
      { RX_LLAMA3 }, true, true, false },
    { "dbrx", "dbrx smaug-bpe", { RX_LLAMA3 }, false, false, false },
    { "chatglm-bpe", "chatglm-bpe glm4", { RX_LLAMA3 }, false, false, true },
    { "qwen2", "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
      { RX_QWEN2 }, false, false, false },
    { "smollm", "smollm starcoder refact command-r codeshell exaone minerva-7b mellum2",
      { "\\p{N}", RX_GPT2 }, false, false, false },
    { "falcon", "falcon",
      { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]" },
      false, false, false },
    { "deepseek-coder", "deepseek-coder",
      { "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_CJK, "\\p{N}" },
      false, false, false },
    { "deepseek-llm", "deepseek-llm",
      { "[\\r\\n]", RX_DEEPSEEK_LETTERS, RX_DEEPSEEK_PUNCT, "\\s+$", RX_CJK, "\\p{N}+" },
      false, false, false },
    { "deepseek-v3", "deepseek-v3 hunyuan-dense joyai-llm hy_v4",
      { "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
        RX_DEEPSEEK3 },
      false, false, false },
    { "gpt-4o", "gpt-4o llama4 kanana2 talkie minimax-m2", { RX_GPT4O }, false, false, false },
    { "tekken", "tekken", { RX_TEKKEN }, true, true, false },
    { "seed-coder", "seed-coder", { RX_SEED_CODER }, false, false, false },
    { "bailingmoe", "bailingmoe bailingmoe2 llada-moe", { RX_BAILING }, false, false, false },
    { "viking", "viking", { RX_BLOOM, "\\p{N}" }, false, false, false },
    { "poro-chat", "poro-chat bloom gpt3-finnish", { RX_BLOOM }, false, false, false },
};
#define N_PRE (sizeof pre_table / sizeof pre_table[0])

struct rvl_pretok {
    rvl_pretok_info info;
    size_t n_rx;
    pcre2_code *rx[MAX_RX];
};

/* ======================================================================
 * Spans
 * ====================================================================== */

int rvl_pretok_spans_push(rvl_spans *s, size_t start, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        size_t *a = realloc(s->start, cap * sizeof *a);
        if (!a)
            return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
        s->start = a;
        size_t *b = realloc(s->len, cap * sizeof *b);
        if (!b)
            return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
        s->len = b;
        s->cap = cap;
    }
    s->start[s->n] = start;
    s->len[s->n] = len;
    s->n++;
    return 0;
}

void rvl_pretok_spans_free(rvl_spans *s)
{
    free(s->start);
    free(s->len);
    memset(s, 0, sizeof *s);
}

/* ======================================================================
 * Lookup and compilation
 * ====================================================================== */

/* Does the space-separated list `aliases` contain name[0..len)? */
static bool alias_match(const char *aliases, const char *name, size_t len)
{
    const char *p = aliases;
    while (*p) {
        const char *e = strchr(p, ' ');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == len && memcmp(p, name, len) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

const char *rvl_pretok_name_at(size_t i)
{
    return i < N_PRE ? pre_table[i].name : NULL;
}

/* JIT-compiled matching is several times faster, but valgrind reports
 * false positives inside JIT code; RUVLLM_NO_JIT=1 (or running under
 * valgrind, which preloads its vgpreload_*.so) uses the interpreter. */
static bool jit_wanted(void)
{
    const char *no = getenv("RUVLLM_NO_JIT");
    const char *pre = getenv("LD_PRELOAD");
    if (no && *no && strcmp(no, "0") != 0)
        return false;
    return !(pre && strstr(pre, "vgpreload"));
}

int rvl_pretok_open(rvl_pretok **out, const char *pre, size_t pre_len)
{
    *out = NULL;
    if (!pre || pre_len == 0) {
        pre = "default";
        pre_len = 7;
    }
    const pre_def *d = NULL;
    for (size_t i = 0; i < N_PRE && !d; i++)
        if (alias_match(pre_table[i].aliases, pre, pre_len))
            d = &pre_table[i];
    if (!d) {
        int shown = pre_len > 64 ? 64 : (int)pre_len;
        return rvl_seterr(RVL_EUNSUPPORTED, "unsupported pre-tokenizer '%.*s'"
                          " (tokenizer.ggml.pre)", shown, pre);
    }

    rvl_pretok *p = calloc(1, sizeof *p);
    if (!p)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    p->info.name = d->name;
    p->info.ignore_merges = d->ignore_merges;
    p->info.add_bos = d->add_bos;
    p->info.no_bos = d->no_bos;

    for (size_t i = 0; i < MAX_RX && d->rx[i]; i++) {
        int err;
        PCRE2_SIZE erroff;
        p->rx[i] = pcre2_compile((PCRE2_SPTR)d->rx[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY,
                                 &err, &erroff, NULL);
        if (!p->rx[i]) {
            /* a bug in the table above, not bad input */
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            rvl_pretok_close(p);
            return rvl_seterr(RVL_EINVAL, "pre-tokenizer '%s': regex %zu does not"
                              " compile at offset %zu: %s", d->name, i,
                              (size_t)erroff, (const char *)msg);
        }
        p->n_rx = i + 1;
        /* JIT is an optimization: the interpreter is used if it fails */
        if (jit_wanted())
            (void)pcre2_jit_compile(p->rx[i], PCRE2_JIT_COMPLETE);
    }
    *out = p;
    return 0;
}

void rvl_pretok_close(rvl_pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_rx; i++)
        pcre2_code_free(p->rx[i]);
    free(p);
}

const rvl_pretok_info *rvl_pretok_get_info(const rvl_pretok *p)
{
    return &p->info;
}

/* ======================================================================
 * Splitting
 * ====================================================================== */

/* Length of the UTF-8 character starting with byte b (text is valid). */
static size_t u8len(unsigned char b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* Split one piece text[start..start+len) by `rx`, appending the matches
 * and the gaps between them to `out`. */
static int split_piece(pcre2_code *rx, pcre2_match_data *md, pcre2_match_context *mc,
                       const char *text, size_t start, size_t len, rvl_spans *out)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + start);
    size_t pos = 0, prev = 0;
    int rc = 0;
    while (pos < len) {
        int m = pcre2_match(rx, subj, len, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(m, msg, sizeof msg);
            return rvl_seterr(RVL_ERANGE, "tokenizer: pre-tokenizer regex failed at"
                              " byte %zu of the text: %s", start + pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            /* empty match: nothing to split here, move one character on */
            pos = ms + (ms < len ? u8len(subj[ms]) : 1);
            continue;
        }
        if (ms > prev && (rc = rvl_pretok_spans_push(out, start + prev, ms - prev)))
            return rc;
        if ((rc = rvl_pretok_spans_push(out, start + ms, me - ms)))
            return rc;
        prev = pos = me;
    }
    if (prev < len && (rc = rvl_pretok_spans_push(out, start + prev, len - prev)))
        return rc;
    return 0;
}

int rvl_pretok_split(const rvl_pretok *p, const char *text, size_t len, rvl_spans *out)
{
    if (len == 0)
        return 0;
    rvl_spans a = {0}, b = {0};
    int rc = rvl_pretok_spans_push(&a, 0, len);
    pcre2_match_data *md = NULL;
    pcre2_match_context *mc = NULL;
    pcre2_jit_stack *js = NULL;
    if (rc)
        goto done;

    mc = pcre2_match_context_create(NULL);
    js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!mc || !js) {
        rc = rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    pcre2_jit_stack_assign(mc, NULL, js);
    /* bound the work one match may do: hostile text must not hang us */
    pcre2_set_match_limit(mc, 20 * 1000 * 1000);
    pcre2_set_heap_limit(mc, 64 * 1024); /* KiB */

    for (size_t r = 0; r < p->n_rx; r++) {
        pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(p->rx[r], NULL);
        if (!md) {
            rc = rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
            goto done;
        }
        b.n = 0;
        for (size_t i = 0; i < a.n; i++)
            if ((rc = split_piece(p->rx[r], md, mc, text, a.start[i], a.len[i], &b)))
                goto done;
        rvl_spans t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < a.n; i++)
        if ((rc = rvl_pretok_spans_push(out, a.start[i], a.len[i])))
            goto done;
done:
    pcre2_match_data_free(md);
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    rvl_pretok_spans_free(&a);
    rvl_pretok_spans_free(&b);
    return rc;
}
