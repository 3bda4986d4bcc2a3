/*
 * tok.c - the tokenizer of a GGUF model: loading the vocabulary from
 * tokenizer.ggml.* metadata, special tokens and accessors (rvl_tok_*).
 * Encoding is in tok_encode.c, the BPE pre-tokenizers in pretok.c, the
 * detokenizer in detok.c.
 *
 * Behaviour follows llama.cpp (its test-tokenizer-0 cases are our tests):
 * the same defaults per model family, special ids from metadata or else
 * detected by their text, the same end-of-generation set, the same pieces.
 * Everything is copied at open, so the rvl_file may be closed afterwards.
 * Allocations are bounded by the metadata's size in the file.
 *
 * Deviations, only on malformed vocabularies: merges whose halves or
 * result are not vocabulary tokens are ignored; a duplicate token text maps
 * to its first id; empty token texts are never matched; a model with
 * add_bos_token but no valid BOS id is refused (as llama.cpp does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "format/format_int.h"
#include "text/tok_int.h"

/* ======================================================================
 * GPT-2 byte <-> unicode mapping: printable Latin-1 bytes map to
 * themselves, the other 68 bytes to U+0100.. in byte order.
 * ====================================================================== */

static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

static void build_byte_map(rvl_tokenizer *t)
{
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof t->cp2b / sizeof t->cp2b[0]; i++)
        t->cp2b[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        t->b2cp[b] = (uint16_t)(byte_is_printable(b) ? b : 256 + n++);
        t->cp2b[t->b2cp[b]] = (int16_t)b;
    }
}

/* Byte of a mapped code point, or -1. */
static int cp_to_byte(const rvl_tokenizer *t, uint32_t cp)
{
    return cp < sizeof t->cp2b / sizeof t->cp2b[0] ? t->cp2b[cp] : -1;
}

/* ======================================================================
 * Vocabulary lookup: text -> id
 * ====================================================================== */

static uint64_t text_hash(const char *s, size_t n)
{
    return XXH3_64bits(s, n);
}

static int32_t find_text(const rvl_tokenizer *t, const char *s, size_t n)
{
    if (n == 0)
        return -1;
    size_t i = (size_t)text_hash(s, n) & t->hmask;
    for (;;) {
        int32_t id = t->hslot[i];
        if (id < 0)
            return -1;
        const tok_entry *e = &t->tok[id];
        if (e->len == n && memcmp(t->text + e->off, s, n) == 0)
            return id;
        i = (i + 1) & t->hmask;
    }
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static int build_text_index(rvl_tokenizer *t)
{
    size_t cap = pow2_at_least((size_t)t->n * 2);
    t->hslot = malloc(cap * sizeof *t->hslot);
    if (!t->hslot)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    memset(t->hslot, 0xFF, cap * sizeof *t->hslot);
    t->hmask = cap - 1;
    for (uint32_t id = 0; id < t->n; id++) {
        const tok_entry *e = &t->tok[id];
        if (e->len == 0 || find_text(t, t->text + e->off, e->len) >= 0)
            continue; /* empty or duplicate: the first id wins */
        size_t i = (size_t)text_hash(t->text + e->off, e->len) & t->hmask;
        while (t->hslot[i] >= 0)
            i = (i + 1) & t->hmask;
        t->hslot[i] = (int32_t)id;
    }
    return 0;
}

/* ======================================================================
 * Merges: (left id, right id) -> rank, result id
 * ====================================================================== */

static uint64_t merge_key(int32_t l, int32_t r)
{
    /* +1 keeps key 0 free as the empty marker */
    return ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
}

static size_t merge_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

const merge_slot *rvl_tok_merge_find(const rvl_tokenizer *t, int32_t l, int32_t r)
{
    if (!t->mslot || l < 0 || r < 0)
        return NULL;
    uint64_t k = merge_key(l, r);
    size_t i = merge_hash(k) & t->mmask;
    for (;;) {
        const merge_slot *m = &t->mslot[i];
        if (m->key == 0)
            return NULL;
        if (m->key == k)
            return m;
        i = (i + 1) & t->mmask;
    }
}

static int load_merges(rvl_tokenizer *t, const rvl_kv *kv, const char *path)
{
    if (!kv)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.merges is missing"
                          " (required by the gpt2 tokenizer)", path);
    if (kv->type != RVL_GGUF_ARRAY || kv->arr_type != RVL_GGUF_STRING || !kv->strs)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.merges has type %s,"
                          " expected an array of strings", path,
                          rvl_gguf_vtype_name(kv->type));
    if (kv->n > INT32_MAX)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.merges has too many"
                          " entries (%llu)", path, (unsigned long long)kv->n);
    size_t cap = pow2_at_least((size_t)kv->n * 2);
    t->mslot = calloc(cap, sizeof *t->mslot);
    if (!t->mslot)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    /* each page written once before the probes: a probe reading a fresh
     * page maps the shared zero page, and the insert after it copies the
     * page and flushes the TLB of every CPU the process runs on (the model
     * load opens the tokenizer beside its packing threads: ~500 IPIs) */
    for (size_t o = 0; o < cap * sizeof *t->mslot; o += 4096)
        ((volatile char *)t->mslot)[o] = 0;
    t->mmask = cap - 1;

    char *tmp = NULL;
    size_t cap_tmp = 0;
    for (uint64_t r = 0; r < kv->n; r++) {
        rvl_str s = kv->strs[r];
        /* "left right": split at the first space after the first byte */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp)
            continue;
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        int32_t l = find_text(t, s.ptr, ll);
        int32_t rr = find_text(t, sp + 1, rl);
        if (l < 0 || rr < 0)
            continue;
        if (ll + rl > cap_tmp) {
            size_t nc = (ll + rl) * 2;
            char *p = realloc(tmp, nc);
            if (!p) {
                free(tmp);
                return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
            }
            tmp = p;
            cap_tmp = nc;
        }
        memcpy(tmp, s.ptr, ll);
        memcpy(tmp + ll, sp + 1, rl);
        int32_t res = find_text(t, tmp, ll + rl);
        if (res < 0)
            continue;
        uint64_t k = merge_key(l, rr);
        size_t i = merge_hash(k) & t->mmask;
        while (t->mslot[i].key != 0 && t->mslot[i].key != k)
            i = (i + 1) & t->mmask;
        if (t->mslot[i].key == k)
            continue; /* duplicate pair: the lower rank wins */
        t->mslot[i].key = k;
        t->mslot[i].rank = (int32_t)r;
        t->mslot[i].result = res;
    }
    free(tmp);
    return 0;
}

/* ======================================================================
 * Loading
 * ====================================================================== */

static const rvl_kv *kv_find(const rvl_file *f, const char *key)
{
    return rvl_file_find_kv(f, key);
}

/* Read an optional token id key into *id when present and in range. */
static void read_id(const rvl_file *f, const char *key, uint32_t n, int32_t *id)
{
    uint64_t v;
    const rvl_kv *kv = kv_find(f, key);
    if (kv && rvl_kv_get_u64(kv, &v) == 0 && v < n)
        *id = (int32_t)v;
}

static int read_bool(const rvl_file *f, const char *key, bool *b, const char *path)
{
    const rvl_kv *kv = kv_find(f, key);
    uint64_t v;
    if (!kv)
        return 0;
    if (rvl_kv_get_u64(kv, &v) != 0)
        return rvl_seterr(RVL_EFORMAT, "%s: %s has type %s, expected a bool", path,
                          key, rvl_gguf_vtype_name(kv->type));
    *b = v != 0;
    return 0;
}

static bool is_numeric_vtype(uint32_t vt)
{
    return vt != RVL_GGUF_STRING && vt != RVL_GGUF_ARRAY && vt != RVL_GGUF_BOOL &&
           rvl_gguf_vtype_size(vt) != 0;
}

/* Find the first name of `names` (NULL-terminated, in priority order) that
 * is a vocabulary token. */
static int32_t find_any(const rvl_tokenizer *t, const char *const *names)
{
    for (; *names; names++) {
        int32_t id = find_text(t, *names, strlen(*names));
        if (id >= 0)
            return id;
    }
    return -1;
}

static bool has_text(const rvl_tokenizer *t, int32_t id, const char *s)
{
    return id >= 0 && t->tok[id].len == strlen(s) &&
           memcmp(t->text + t->tok[id].off, s, t->tok[id].len) == 0;
}

/* Special-token detection by text, for vocabularies whose metadata lacks
 * the ids (llama.cpp's lists; a detected token becomes a control token). */
static const char *const EOT_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL,
};
static const char *const EOM_NAMES[] = { "<|eom_id|>", NULL };
static const char *const FIM_PRE_NAMES[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
    "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL,
};
static const char *const FIM_SUF_NAMES[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
    "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL,
};
static const char *const FIM_MID_NAMES[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
    "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL,
};
static const char *const FIM_PAD_NAMES[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL,
};
static const char *const FIM_REP_NAMES[] = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL,
};
static const char *const FIM_SEP_NAMES[] = { "<|file_sep|>", NULL };
static const char *const EOG_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
    "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[", NULL,
};

static void detect_id(rvl_tokenizer *t, int32_t *id, const char *const *names)
{
    if (*id >= 0)
        return;
    *id = find_any(t, names);
    if (*id >= 0)
        t->tok[*id].attr |= A_CONTROL;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int add_eog(rvl_tokenizer *t, int32_t id, size_t cap)
{
    if (id < 0)
        return 0;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    if (t->n_eog < cap)
        t->eog[t->n_eog++] = id;
    return 0;
}

static int build_eog(rvl_tokenizer *t)
{
    size_t n_names = sizeof EOG_NAMES / sizeof EOG_NAMES[0];
    size_t cap = n_names + 8;
    t->eog = malloc(cap * sizeof *t->eog);
    if (!t->eog)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    add_eog(t, t->fim_pad, cap);
    add_eog(t, t->fim_rep, cap);
    add_eog(t, t->fim_sep, cap);
    for (const char *const *nm = EOG_NAMES; *nm; nm++) {
        int32_t id = find_text(t, *nm, strlen(*nm));
        if (id >= 0) {
            t->tok[id].attr |= A_CONTROL;
            add_eog(t, id, cap);
        }
    }
    add_eog(t, t->eos, cap);
    add_eog(t, t->eot, cap);
    add_eog(t, t->eom, cap);

    /* harmony-style vocabularies end a message with <|end|> but keep
     * generating: with <|return|> and <|call|> present it is not EOG */
    bool ret = false, call = false, flush = false;
    int32_t end = -1;
    for (size_t i = 0; i < t->n_eog; i++) {
        int32_t id = t->eog[i];
        if (has_text(t, id, "<|return|>")) ret = true;
        else if (has_text(t, id, "<|call|>") || has_text(t, id, "<|calls|>")) call = true;
        else if (has_text(t, id, "<|flush|>")) flush = true;
        else if (has_text(t, id, "<|end|>")) end = id;
    }
    if (end >= 0 && ((ret && call) || (call && flush))) {
        size_t j = 0;
        for (size_t i = 0; i < t->n_eog; i++)
            if (t->eog[i] != end)
                t->eog[j++] = t->eog[i];
        t->n_eog = j;
        t->tok[end].attr = A_USER;
    }
    /* harmony's message markers are always parsed and rendered, as
     * llama.cpp makes them (user-defined, whatever the file says): a
     * reply's channels show in its text */
    static const char *const HARMONY_USER[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *nm = HARMONY_USER; *nm; nm++) {
        int32_t id = find_text(t, *nm, strlen(*nm));
        if (id >= 0)
            t->tok[id].attr = A_USER;
    }
    qsort(t->eog, t->n_eog, sizeof *t->eog, cmp_i32);
    return 0;
}

/* Parse "<0xNN>"; -1 if s is not of that form. */
static int parse_byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The bytes a token stands for when rendered with special = true.
 * Writes at most 4 * len bytes (+1 for byte tokens) into o. */
static size_t render_piece(const rvl_tokenizer *t, const tok_entry *e, char *o)
{
    const char *s = t->text + e->off;
    size_t n = e->len, k = 0;
    if (e->attr & (A_UNKNOWN | A_CONTROL | A_USER)) {
        memcpy(o, s, n);
        return n;
    }
    if (e->attr & A_NORMAL) {
        if (t->kind == KIND_SPM) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(s + i, RVL_U8_SPM_SPACE, 3) == 0) {
                    o[k++] = ' ';
                    i += 3;
                } else {
                    o[k++] = s[i++];
                }
            }
            return k;
        }
        /* byte-level BPE: every mapped character stands for one byte;
         * anything else is copied as it is */
        for (size_t i = 0; i < n;) {
            size_t sub;
            bool trunc;
            size_t l = rvl_utf8_check((const uint8_t *)s + i, n - i, &sub, &trunc);
            if (!l) {
                o[k++] = s[i++];
                continue;
            }
            int b = cp_to_byte(t, rvl_utf8_decode((const uint8_t *)s + i, l));
            if (b >= 0) {
                o[k++] = (char)b;
            } else {
                memcpy(o + k, s + i, l);
                k += l;
            }
            i += l;
        }
        return k;
    }
    if (e->attr & A_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0)
            o[k++] = (char)b;
        return k;
    }
    return 0; /* unused or undefined types render as nothing */
}

static int build_pieces(rvl_tokenizer *t, size_t text_bytes)
{
    /* a piece is never longer than its text (+1 for a byte token) */
    uint64_t cap;
    if (rvl_add_ovf(text_bytes, t->n, &cap) || cap > UINT32_MAX)
        return rvl_seterr(RVL_EFORMAT, "tokenizer: vocabulary text too large");
    t->piece = malloc(cap ? cap : 1);
    if (!t->piece)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    uint32_t k = 0;
    for (uint32_t id = 0; id < t->n; id++) {
        tok_entry *e = &t->tok[id];
        e->poff = k;
        e->plen = (uint32_t)render_piece(t, e, t->piece + k);
        k += e->plen;
        if (e->plen > t->max_piece)
            t->max_piece = e->plen;
    }
    return 0;
}

/* Special tokens: longest text first, then lower id. */
typedef struct {
    uint32_t len;
    int32_t id;
} spec_key;

static int cmp_spec(const void *a, const void *b)
{
    const spec_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int build_specials(rvl_tokenizer *t)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n; id++)
        if ((t->tok[id].attr & (A_CONTROL | A_USER | A_UNKNOWN)) && t->tok[id].len)
            n++;
    t->spec = malloc((n ? n : 1) * sizeof *t->spec);
    t->spec_by_byte = malloc((n ? n : 1) * sizeof *t->spec_by_byte);
    if (!t->spec || !t->spec_by_byte)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    spec_key *keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    n = 0;
    for (uint32_t id = 0; id < t->n; id++)
        if ((t->tok[id].attr & (A_CONTROL | A_USER | A_UNKNOWN)) && t->tok[id].len)
            keys[n++] = (spec_key){ t->tok[id].len, (int32_t)id };
    qsort(keys, n, sizeof *keys, cmp_spec);
    for (uint32_t i = 0; i < n; i++)
        t->spec[i] = keys[i].id;
    free(keys);
    t->n_spec = n;

    /* bucket by first byte, keeping the priority order within a bucket */
    uint32_t count[256] = {0};
    for (uint32_t i = 0; i < n; i++)
        count[(uint8_t)t->text[t->tok[t->spec[i]].off]]++;
    t->bucket[0] = 0;
    for (int b = 0; b < 256; b++)
        t->bucket[b + 1] = t->bucket[b] + count[b];
    uint32_t fill[256];
    memcpy(fill, t->bucket, sizeof fill);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)t->text[t->tok[t->spec[i]].off];
        t->spec_by_byte[fill[b]++] = (int32_t)i; /* index into spec = priority */
    }
    return 0;
}

/* Copy a metadata string into a fixed buffer (truncating), NUL-terminated. */
static void copy_str(char *dst, size_t cap, rvl_str s)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = 0;
}

static int load_tokens(rvl_tokenizer *t, const rvl_file *f, const char *path,
                       size_t *text_bytes)
{
    const rvl_kv *kt = kv_find(f, "tokenizer.ggml.tokens");
    if (!kt)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.tokens is missing", path);
    if (kt->type != RVL_GGUF_ARRAY || kt->arr_type != RVL_GGUF_STRING || !kt->strs)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.tokens has type %s, expected"
                          " an array of strings", path, rvl_gguf_vtype_name(kt->type));
    if (kt->n == 0 || kt->n > INT32_MAX)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries",
                          path, (unsigned long long)kt->n);
    t->n = (uint32_t)kt->n;

    const rvl_kv *ks = kv_find(f, "tokenizer.ggml.scores");
    if (ks && (ks->type != RVL_GGUF_ARRAY || !is_numeric_vtype(ks->arr_type)))
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.scores has type %s, expected"
                          " a numeric array", path, rvl_gguf_vtype_name(ks->type));
    if (ks && ks->n < t->n)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.scores has %llu entries for"
                          " %u tokens", path, (unsigned long long)ks->n, t->n);
    const rvl_kv *ky = kv_find(f, "tokenizer.ggml.token_type");
    if (ky && (ky->type != RVL_GGUF_ARRAY || !is_numeric_vtype(ky->arr_type) ||
               ky->arr_type == RVL_GGUF_F32 || ky->arr_type == RVL_GGUF_F64))
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.token_type has type %s,"
                          " expected an integer array", path, rvl_gguf_vtype_name(ky->type));
    if (ky && ky->n < t->n)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.token_type has %llu entries"
                          " for %u tokens", path, (unsigned long long)ky->n, t->n);

    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (rvl_add_ovf(total, kt->strs[i].len, &total) || total > UINT32_MAX / 2)
            return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.tokens holds too much"
                              " text", path);
    t->tok = calloc(t->n, sizeof *t->tok);
    t->text = malloc(total ? total : 1);
    if (!t->tok || !t->text)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    uint32_t off = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        tok_entry *e = &t->tok[i];
        rvl_str s = kt->strs[i];
        e->off = off;
        e->len = (uint32_t)s.len;
        if (s.len)
            memcpy(t->text + off, s.ptr, s.len);
        off += (uint32_t)s.len;
        e->score = ks ? (float)rvl_kv_arr_f64(ks, i) : 0.0f;
        int64_t ty = ky ? rvl_kv_arr_i64(ky, i) : 1;
        e->type = ty >= 0 && ty <= 255 ? (uint8_t)ty : 0;
        switch (ty) {
        case 1: e->attr = A_NORMAL; break;
        case 2: e->attr = A_UNKNOWN; break;
        case 3: e->attr = A_CONTROL; break;
        case 4: e->attr = A_USER; break;
        case 5: e->attr = A_UNUSED; break;
        case 6: e->attr = A_BYTE; break;
        default: e->attr = 0; break;
        }
    }
    *text_bytes = total;
    return 0;
}

int rvl_tok_open(rvl_tokenizer **out, const rvl_file *f)
{
    int rc;
    *out = NULL;
    const char *path = rvl_file_path(f);
    if (!path)
        path = "model";

    rvl_str model;
    const rvl_kv *km = kv_find(f, "tokenizer.ggml.model");
    if (!km)
        return rvl_seterr(RVL_ENOTFOUND, "%s: no tokenizer (tokenizer.ggml.model is"
                          " missing)", path);
    if (rvl_kv_get_str(km, &model) != 0)
        return rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.model has type %s, expected"
                          " a string", path, rvl_gguf_vtype_name(km->type));
    int kind = rvl_str_eq(model, "gpt2") ? KIND_BPE : rvl_str_eq(model, "llama") ? KIND_SPM : 0;
    if (!kind) {
        int shown = model.len > 64 ? 64 : (int)model.len;
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tokenizer model '%.*s' is not supported"
                          " (supported: gpt2, llama)", path, shown, model.ptr);
    }

    rvl_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return rvl_seterr(RVL_ENOMEM, "tokenizer: out of memory");
    t->kind = kind;
    copy_str(t->model, sizeof t->model, model);
    build_byte_map(t);

    rvl_str pre = { "default", 7 };
    const rvl_kv *kp = kv_find(f, "tokenizer.ggml.pre");
    if (kp && rvl_kv_get_str(kp, &pre) != 0) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.pre has type %s, expected a"
                        " string", path, rvl_gguf_vtype_name(kp->type));
        goto fail;
    }
    copy_str(t->pre, sizeof t->pre, pre.len ? pre : (rvl_str){ "default", 7 });

    size_t text_bytes = 0;
    if ((rc = load_tokens(t, f, path, &text_bytes)))
        goto fail;
    if ((rc = build_text_index(t)))
        goto fail;

    /* defaults per model family, as llama.cpp */
    t->eot = t->eom = t->pad = t->nl = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;
    if (kind == KIND_SPM) {
        t->bos = 1; t->eos = 2; t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else {
        t->bos = 11; t->eos = 11; t->unk = -1;
        if ((rc = rvl_pretok_open(&t->pretok, pre.ptr, pre.len))) {
            rvl_preerr(rc, "%s", path);
            goto fail;
        }
        const rvl_pretok_info *pi = rvl_pretok_get_info(t->pretok);
        t->ignore_merges = pi->ignore_merges;
        t->add_bos = pi->add_bos;
        if (pi->no_bos)
            t->bos = -1;
        if ((rc = load_merges(t, kv_find(f, "tokenizer.ggml.merges"), path)))
            goto fail;
    }
    /* an id past the vocabulary is dropped, as llama.cpp does, but said */
    static const char *const special_key[] = {"bos", "eos", "unk"};
    int32_t *special_id[] = {&t->bos, &t->eos, &t->unk};
    for (int i = 0; i < 3; i++)
        if (*special_id[i] >= (int32_t)t->n) {
            if (!t->warning[0])
                snprintf(t->warning, sizeof t->warning, "tokenizer.ggml.%s_token_id %d is "
                         "outside the vocabulary of %u tokens: the model has no %s token",
                         special_key[i], (int)*special_id[i], t->n, special_key[i]);
            *special_id[i] = -1;
        }

    read_id(f, "tokenizer.ggml.bos_token_id", t->n, &t->bos);
    read_id(f, "tokenizer.ggml.eos_token_id", t->n, &t->eos);
    read_id(f, "tokenizer.ggml.eot_token_id", t->n, &t->eot);
    read_id(f, "tokenizer.ggml.eom_token_id", t->n, &t->eom);
    read_id(f, "tokenizer.ggml.unknown_token_id", t->n, &t->unk);
    read_id(f, "tokenizer.ggml.padding_token_id", t->n, &t->pad);
    read_id(f, "tokenizer.ggml.fim_pre_token_id", t->n, &t->fim_pre);
    read_id(f, "tokenizer.ggml.fim_suf_token_id", t->n, &t->fim_suf);
    read_id(f, "tokenizer.ggml.fim_mid_token_id", t->n, &t->fim_mid);
    read_id(f, "tokenizer.ggml.fim_pad_token_id", t->n, &t->fim_pad);
    read_id(f, "tokenizer.ggml.fim_rep_token_id", t->n, &t->fim_rep);
    read_id(f, "tokenizer.ggml.fim_sep_token_id", t->n, &t->fim_sep);
    read_id(f, "tokenizer.ggml.prefix_token_id", t->n, &t->fim_pre);
    read_id(f, "tokenizer.ggml.suffix_token_id", t->n, &t->fim_suf);
    read_id(f, "tokenizer.ggml.middle_token_id", t->n, &t->fim_mid);

    if ((rc = read_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, path)) ||
        (rc = read_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos, path)) ||
        (rc = read_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, path)))
        goto fail;
    if (t->add_bos && t->bos < 0) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.add_bos_token is true but"
                        " there is no valid bos_token_id", path);
        goto fail;
    }
    if (t->add_eos && t->eos < 0) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.add_eos_token is true but"
                        " there is no valid eos_token_id", path);
        goto fail;
    }

    detect_id(t, &t->eot, EOT_NAMES);
    detect_id(t, &t->eom, EOM_NAMES);
    detect_id(t, &t->fim_pre, FIM_PRE_NAMES);
    detect_id(t, &t->fim_suf, FIM_SUF_NAMES);
    detect_id(t, &t->fim_mid, FIM_MID_NAMES);
    detect_id(t, &t->fim_pad, FIM_PAD_NAMES);
    detect_id(t, &t->fim_rep, FIM_REP_NAMES);
    detect_id(t, &t->fim_sep, FIM_SEP_NAMES);
    if ((rc = build_eog(t)))
        goto fail;

    /* single-byte tokens */
    for (int b = 0; b < 256; b++) {
        char s[8];
        if (kind == KIND_BPE) {
            size_t l = rvl_utf8_encode(t->b2cp[b], s);
            t->byte_tok[b] = find_text(t, s, l);
        } else {
            static const char hex[] = "0123456789ABCDEF";
            char h[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
            int32_t id = find_text(t, h, 6);
            if (id < 0) {
                s[0] = (char)b;
                id = find_text(t, s, 1);
            }
            t->byte_tok[b] = id;
        }
    }

    if ((rc = build_specials(t)) || (rc = build_pieces(t, text_bytes)))
        goto fail;

    if (kind == KIND_SPM) {
        memset(t->spm_barrier, 1, sizeof t->spm_barrier);
        for (uint32_t id = 0; id < t->n; id++) {
            const tok_entry *e = &t->tok[id];
            if (e->len < 2)
                continue;
            for (uint32_t i = 0; i < e->len; i++) {
                uint8_t c = (uint8_t)t->text[e->off + i];
                if (c < 0x80)
                    t->spm_barrier[c] = 0;
            }
        }
    }

    /* newline token */
    if (kind == KIND_SPM) {
        t->nl = t->byte_tok['\n'];
    } else {
        int32_t id;
        size_t n = 0;
        if (rvl_tok_encode(t, "\n", 1, false, false, &id, 1, &n) == 0 && n == 1)
            t->nl = id;
        else
            t->nl = t->pad;
    }
    *out = t;
    return 0;
fail:
    rvl_tok_close(t);
    return rc;
}

void rvl_tok_close(rvl_tokenizer *t)
{
    if (!t)
        return;
    rvl_pretok_close(t->pretok);
    free(t->tok);
    free(t->text);
    free(t->piece);
    free(t->hslot);
    free(t->mslot);
    free(t->spec);
    free(t->spec_by_byte);
    free(t->eog);
    free(t);
}

/* ======================================================================
 * Accessors
 * ====================================================================== */

const char *rvl_tok_model(const rvl_tokenizer *t) { return t->model; }
const char *rvl_tok_warning(const rvl_tokenizer *t) { return t->warning[0] ? t->warning : NULL; }
const char *rvl_tok_pre(const rvl_tokenizer *t) { return t->kind == KIND_BPE ? t->pre : "default"; }
int32_t rvl_tok_n_vocab(const rvl_tokenizer *t) { return (int32_t)t->n; }
int32_t rvl_tok_bos(const rvl_tokenizer *t) { return t->bos; }
int32_t rvl_tok_eos(const rvl_tokenizer *t) { return t->eos; }
int32_t rvl_tok_unk(const rvl_tokenizer *t) { return t->unk; }
int32_t rvl_tok_nl(const rvl_tokenizer *t) { return t->nl; }
bool rvl_tok_add_bos(const rvl_tokenizer *t) { return t->add_bos; }

static bool valid_id(const rvl_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n;
}

bool rvl_tok_is_eog(const rvl_tokenizer *t, int32_t id)
{
    if (!valid_id(t, id))
        return false;
    return bsearch(&id, t->eog, t->n_eog, sizeof *t->eog, cmp_i32) != NULL;
}

bool rvl_tok_is_control(const rvl_tokenizer *t, int32_t id)
{
    return valid_id(t, id) && (t->tok[id].attr & (A_CONTROL | A_UNKNOWN));
}

int rvl_tok_type(const rvl_tokenizer *t, int32_t id)
{
    if (!valid_id(t, id))
        return 0;
    uint8_t a = t->tok[id].attr;
    /* report what the tokenizer treats the token as (detected EOG and FIM
     * tokens count as control) */
    if (a & A_CONTROL) return RVL_TOK_CONTROL;
    if (a & A_USER) return RVL_TOK_USER_DEFINED;
    if (a & A_UNKNOWN) return RVL_TOK_UNKNOWN;
    if (a & A_BYTE) return RVL_TOK_BYTE;
    if (a & A_UNUSED) return RVL_TOK_UNUSED;
    if (a & A_NORMAL) return RVL_TOK_NORMAL;
    return t->tok[id].type;
}

const char *rvl_tok_text(const rvl_tokenizer *t, int32_t id, size_t *len)
{
    if (!valid_id(t, id)) {
        *len = 0;
        return NULL;
    }
    *len = t->tok[id].len;
    return t->text + t->tok[id].off;
}

int32_t rvl_tok_find(const rvl_tokenizer *t, const char *text, size_t len)
{
    return find_text(t, text, len);
}

int rvl_tok_piece(const rvl_tokenizer *t, int32_t id, bool special,
                  const char **piece, size_t *len)
{
    if (!valid_id(t, id)) {
        *piece = "";
        *len = 0;
        return rvl_seterr(RVL_EINVAL, "token id %d is out of range (the vocabulary"
                          " has %u tokens)", (int)id, t->n);
    }
    const tok_entry *e = &t->tok[id];
    *piece = t->piece + e->poff;
    *len = !special && (e->attr & (A_CONTROL | A_UNKNOWN)) ? 0 : e->plen;
    return 0;
}
