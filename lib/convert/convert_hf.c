/*
 * convert_hf.c - a Hugging Face model directory as the input of
 * quantize and dequant.
 *
 * The directory (config.json, one or sharded *.safetensors,
 * tokenizer.json, tokenizer_config.json) is imported into a GGUF file of
 * the same weights next to the output - what llama.cpp's
 * convert_hf_to_gguf.py makes with --outtype auto, facts of both formats
 * in our own code: hyper-parameters from config.json, the vocabulary,
 * token types, merges, special tokens and the pre-tokenizer's name from
 * tokenizer.json / tokenizer_config.json (byte-level BPE -> "gpt2";
 * BPE with byte_fallback -> SentencePiece "llama", scores from the merge
 * ranks, <0xHH> byte tokens), the chat template; tensors
 * renamed (model.layers.N.self_attn.q_proj -> blk.N.attn_q, ...), llama's
 * Q/K rows reordered from Hugging Face's two halves to interleaved pairs,
 * matrices kept in their dtype (F32, F16, BF16), 1-D tensors in F32. The
 * import is opened and unlinked at once (the mapping keeps it), so nothing
 * of it outlives the process.
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/convert_int.h"
#include "engine/model.h"
#include "formats.h"

/* Vocabularies larger than this are refused (the largest real ones have
 * about 256k tokens). */
#define MAX_VOCAB (1u << 21)

/* ======================================================================
 * JSON files
 * ====================================================================== */
static int parse_json(const char *name, const void *buf, size_t n, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(buf, n, &end, false);
    if (!*out) {
        uint64_t off = end ? (uint64_t)(end - (const char *)buf) : 0;
        return rvl_seterr(RVL_EFORMAT, "%s: not valid JSON (byte %llu)", name, (unsigned long long)off);
    }
    return 0;
}

static int read_json(const char *dir, const char *name, bool required, cJSON **out)
{
    char path[4200];
    rvl_map m = {0};
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, F_OK) != 0)
        return required ? rvl_seterr(RVL_ENOTFOUND, "%s: missing (a Hugging Face model "
                                     "directory has config.json, tokenizer.json, "
                                     "tokenizer_config.json and *.safetensors)", path) : 0;
    int rc = rvl_map_file(&m, path);
    if (rc < 0)
        return rc;
    rc = parse_json(path, m.base, (size_t)m.size, out);
    rvl_map_unmap(&m);
    return rc;
}

static bool jnum(const cJSON *o, const char *k, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x))
        return false;
    *v = x->valuedouble;
    return true;
}

static bool ju32(const cJSON *o, const char *k, uint32_t *v)
{
    double d;
    if (!jnum(o, k, &d) || d < 0 || d > UINT32_MAX || d != (double)(uint32_t)d)
        return false;
    *v = (uint32_t)d;
    return true;
}

/* A special token's text in tokenizer_config.json: a string or {"content": ...}. */
static const char *jtoken(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsObject(x))
        x = cJSON_GetObjectItemCaseSensitive(x, "content");
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* ======================================================================
 * Hyper-parameters
 * ====================================================================== */
typedef struct {
    const char *arch;       /* "llama", "qwen2" */
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, n_ctx, head_dim, n_vocab;
    double eps, rope_base;
    const char *rope_type;  /* NULL, "linear", "yarn" */
    double rope_factor;
    uint32_t rope_orig_ctx;
    bool tied;
} hparams;

/* The loader's validation (engine/model.c), so that the import never
 * writes a GGUF that `run` refuses or, for a value that overflowed to
 * infinity, misreads. */
static int check_hparams(const char *path, const hparams *h)
{
    rvl_hparams hp = {0};
    snprintf(hp.arch, sizeof hp.arch, "%s", h->arch);
    hp.n_layer = h->n_layer;
    hp.n_embd = h->n_embd;
    hp.n_ff = h->n_ff;
    hp.n_head = h->n_head;
    hp.n_head_kv = h->n_head_kv;
    hp.head_dim = h->head_dim;
    hp.rope_dim = h->head_dim;
    hp.n_ctx_train = h->n_ctx;
    hp.rms_eps = (float)h->eps;
    hp.rope_base = (float)h->rope_base;
    hp.rope_scaling = !h->rope_type ? RVL_ROPE_SCALING_NONE
                      : !strcmp(h->rope_type, "linear") ? RVL_ROPE_SCALING_LINEAR
                                                        : RVL_ROPE_SCALING_YARN;
    hp.rope_factor = h->rope_type ? (float)h->rope_factor : 1.0f;
    hp.rope_orig_ctx = h->rope_orig_ctx ? h->rope_orig_ctx : h->n_ctx;
    hp.rope_attn_factor = 1.0f;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    int rc = rvl_model_check_hparams(&hp, path);
    return rc < 0 ? rvl_preerr(rc, "config.json") : 0;
}

static int read_hparams(const char *path, const cJSON *c, hparams *h)
{
    memset(h, 0, sizeof *h);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    const char *an = cJSON_IsArray(a) && cJSON_IsString(cJSON_GetArrayItem(a, 0))
                         ? cJSON_GetArrayItem(a, 0)->valuestring : "";
    if (!strcmp(an, "LlamaForCausalLM") || !strcmp(an, "MistralForCausalLM"))
        h->arch = "llama";
    else if (!strcmp(an, "Qwen2ForCausalLM"))
        h->arch = "qwen2";
    else
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: architecture '%s': the Hugging Face import "
                          "knows LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM", path, an);
    static const char *const req[] = {"num_hidden_layers", "hidden_size", "intermediate_size",
                                      "num_attention_heads"};
    uint32_t *dst[] = {&h->n_layer, &h->n_embd, &h->n_ff, &h->n_head};
    for (int i = 0; i < 4; i++)
        if (!ju32(c, req[i], dst[i]) || *dst[i] == 0 || *dst[i] > (1u << 24))
            return rvl_seterr(RVL_EFORMAT, "%s: missing or bad %s", path, req[i]);
    if (!ju32(c, "num_key_value_heads", &h->n_head_kv))
        h->n_head_kv = h->n_head;
    if (!ju32(c, "head_dim", &h->head_dim) || h->head_dim == 0)
        h->head_dim = h->n_embd / h->n_head;
    if (h->n_head_kv == 0 || h->n_head % h->n_head_kv || h->head_dim % 2)
        return rvl_seterr(RVL_EFORMAT, "%s: inconsistent head counts", path);
    if (!ju32(c, "max_position_embeddings", &h->n_ctx))
        h->n_ctx = 2048;
    if (!jnum(c, "rms_norm_eps", &h->eps))
        h->eps = 1e-6;
    if (ju32(c, "vocab_size", &h->n_vocab) && h->n_vocab > MAX_VOCAB)
        return rvl_seterr(RVL_EFORMAT, "%s: vocab_size %u is implausibly large", path, h->n_vocab);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");   /* transformers 5 */
    if (!jnum(c, "rope_theta", &h->rope_base) && !(cJSON_IsObject(rp) && jnum(rp, "rope_theta", &h->rope_base)))
        h->rope_base = 10000;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    if (!cJSON_IsObject(rs))
        rs = rp;
    if (cJSON_IsObject(rs)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(t))
            t = cJSON_GetObjectItemCaseSensitive(rs, "type");
        const char *ty = cJSON_IsString(t) ? t->valuestring : "default";
        if (!strcmp(ty, "linear") || !strcmp(ty, "yarn")) {
            h->rope_type = !strcmp(ty, "linear") ? "linear" : "yarn";
            if (!jnum(rs, "factor", &h->rope_factor))
                return rvl_seterr(RVL_EFORMAT, "%s: rope_scaling without a factor", path);
            ju32(rs, "original_max_position_embeddings", &h->rope_orig_ctx);
        } else if (strcmp(ty, "default") != 0) {
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: rope scaling '%s'", path, ty);
        }
    }
    const cJSON *tw = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
    h->tied = cJSON_IsBool(tw) ? cJSON_IsTrue(tw) : false;
    return check_hparams(path, h);
}

/* ======================================================================
 * Tokenizer
 * ====================================================================== */
#define HF_RX_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_RX_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static bool is_type(const cJSON *o, const char *t)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(x) && !strcmp(x->valuestring, t);
}

static const char *split_regex(const cJSON *o)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    return is_type(o, "Split") && cJSON_IsString(r) ? r->valuestring : NULL;
}

/* tokenizer.ggml.pre from the shape of the pre_tokenizer (llama.cpp hashes
 * the tokenization of a test text instead; these are the forms of the
 * vocabularies we run). NULL when unknown. */
static const char *pre_name(const cJSON *pt)
{
    if (is_type(pt, "ByteLevel"))
        return "gpt-2";
    if (!is_type(pt, "Sequence"))
        return NULL;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    int n = cJSON_GetArraySize(l);
    const cJSON *a = cJSON_GetArrayItem(l, 0), *b = cJSON_GetArrayItem(l, 1);
    if (n == 2 && is_type(a, "Digits") && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "individual_digits")) &&
        is_type(b, "ByteLevel"))
        return "smollm";
    const char *rx = n == 2 && is_type(b, "ByteLevel") ? split_regex(a) : NULL;
    if (rx && !strcmp(rx, HF_RX_LLAMA3))
        return "llama-bpe";
    if (rx && !strcmp(rx, HF_RX_QWEN2))
        return "qwen2";
    return NULL;
}

typedef struct {
    char **tok;             /* n_vocab texts */
    int32_t *type;
    uint32_t n;
    char **merges;
    uint32_t n_merges;
    const char *pre;
    int64_t bos, eos, unk, pad;
    bool add_bos, add_eos;
    char *chat_template;
    bool spm;               /* SentencePiece BPE (byte_fallback): model "llama" */
    float *scores;          /* spm: -(rank of the first merge making the token), else 0 */
    bool add_space_prefix;
} vocab;

static void vocab_free(vocab *v)
{
    for (uint32_t i = 0; v->tok && i < v->n; i++)
        free(v->tok[i]);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tok);
    free(v->type);
    free(v->merges);
    free(v->chat_template);
    free(v->scores);
}

static uint64_t h_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static int64_t find_tok(const vocab *v, const char *s)
{
    for (uint32_t i = 0; s && i < v->n; i++)
        if (v->tok[i] && !strcmp(v->tok[i], s))
            return i;
    return -1;
}

/* tokenizer.json's model.merges ("a b" strings or [a, b] pairs) into
 * v->merges, as "a b". */
static int read_merges(const char *path, const cJSON *model, vocab *v)
{
    const cJSON *e;
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(model, "merges");
    int nm = cJSON_GetArraySize(ml);
    v->merges = calloc(nm > 0 ? (size_t)nm : 1, sizeof *v->merges);
    if (!v->merges)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    cJSON_ArrayForEach(e, ml) {
        char *s = NULL;
        if (cJSON_IsString(e)) {
            s = strdup(e->valuestring);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            if ((s = malloc(la + lb + 2)) != NULL) {
                memcpy(s, a, la);
                s[la] = ' ';
                memcpy(s + la + 1, b, lb + 1);
            }
        } else {
            return rvl_seterr(RVL_EFORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", path, v->n_merges);
        }
        if (!s)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        v->merges[v->n_merges++] = s;
    }
    return 0;
}

/* SentencePiece-style vocabularies: scores from the merge ranks
 * (SentencePiece merges the pair whose result scores highest, BPE the
 * pair of lowest rank). */
static int spm_scores(vocab *v)
{
    v->scores = calloc(v->n, sizeof *v->scores);
    bool *set = calloc(v->n, 1);
    uint64_t hcap = 1;
    while (hcap < 2ull * v->n)
        hcap <<= 1;
    uint32_t *slot = calloc((size_t)hcap, sizeof *slot);
    int rc = 0;
    if (!v->scores || !set || !slot) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
    } else {
        for (uint32_t i = 0; i < v->n; i++) {
            uint64_t k = h_str(v->tok[i]) & (hcap - 1);
            while (slot[k])
                k = (k + 1) & (hcap - 1);
            slot[k] = i + 1;
        }
        char buf[512];
        for (uint32_t r = 0; r < v->n_merges; r++) {
            const char *sp = strchr(v->merges[r], ' ');
            size_t la = sp ? (size_t)(sp - v->merges[r]) : 0, lb = sp ? strlen(sp + 1) : 0;
            if (!sp || la + lb >= sizeof buf)
                continue;
            memcpy(buf, v->merges[r], la);
            memcpy(buf + la, sp + 1, lb + 1);
            for (uint64_t k = h_str(buf) & (hcap - 1); slot[k]; k = (k + 1) & (hcap - 1)) {
                uint32_t id = slot[k] - 1;
                if (!strcmp(v->tok[id], buf)) {
                    if (!set[id]) {
                        set[id] = true;
                        v->scores[id] = -(float)r;
                    }
                    break;
                }
            }
        }
    }
    free(set);
    free(slot);
    return rc;
}

/* The special tokens: tokenizer_config.json's texts, else config.json's
 * ids; whether BOS and EOS are added. */
static void read_specials(const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                          const cJSON *unk_tok, vocab *v)
{
    v->bos = find_tok(v, jtoken(tc, "bos_token"));
    v->eos = find_tok(v, jtoken(tc, "eos_token"));
    v->unk = find_tok(v, jtoken(tc, "unk_token"));
    if (v->unk < 0 && cJSON_IsString(unk_tok))
        v->unk = find_tok(v, unk_tok->valuestring);
    v->pad = find_tok(v, jtoken(tc, "pad_token"));
    uint32_t id;
    if (v->bos < 0 && ju32(cfg, "bos_token_id", &id) && id < v->n) v->bos = id;
    if (v->eos < 0 && ju32(cfg, "eos_token_id", &id) && id < v->n) v->eos = id;
    if (v->pad < 0 && ju32(cfg, "pad_token_id", &id) && id < v->n) v->pad = id;
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
    if (cJSON_IsBool(ab)) {
        v->add_bos = cJSON_IsTrue(ab);
    } else {   /* a TemplateProcessing that starts with a special token */
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor");
        const cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
        v->add_bos = is_type(pp, "TemplateProcessing") && cJSON_GetObjectItemCaseSensitive(s0, "SpecialToken");
    }
    v->add_eos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token"));
}

/* The chat template: tokenizer_config.json's (the default of a list), else
 * chat_template.jinja's; none is no error. */
static int read_chat_template(const char *dir, const cJSON *tc, vocab *v)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    if (cJSON_IsArray(ct)) {    /* [{name, template}, ...]: the default one */
        const cJSON *x, *pick = NULL;
        cJSON_ArrayForEach(x, ct) {
            const cJSON *nm2 = cJSON_GetObjectItemCaseSensitive(x, "name");
            if (!pick || (cJSON_IsString(nm2) && !strcmp(nm2->valuestring, "default")))
                pick = x;
        }
        ct = cJSON_GetObjectItemCaseSensitive(pick, "template");
    }
    if (cJSON_IsString(ct)) {
        if (!(v->chat_template = strdup(ct->valuestring)))
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    } else {   /* newer directories: chat_template.jinja */
        rvl_map m = {0};
        char path[4200];
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        if (access(path, F_OK) == 0 && rvl_map_file(&m, path) == 0) {
            v->chat_template = strndup(m.base, (size_t)m.size);
            rvl_map_unmap(&m);
        }
    }
    return 0;
}

/* The vocabulary of dir/tokenizer.json (tj), with tokenizer_config.json
 * (tc) and config.json (cfg): tokens and their types, merges, SentencePiece
 * scores, special tokens, the chat template. */
static int read_vocab(const char *dir, const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                      const hparams *h, vocab *v)
{
    char path[4200];
    int rc;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = v->pad = -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    if (!is_type(model, "BPE"))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: only BPE vocabularies are imported (byte-level "
                          "and SentencePiece-style with byte_fallback)", path);
    v->spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const cJSON *ptj = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer");
    v->pre = v->spm ? "default" : pre_name(ptj);
    if (v->spm) {
        /* a space in front: a Prepend normalizer or a Metaspace that prepends */
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(tj, "normalizer"), *x;
        const cJSON *nl = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
        if (is_type(nz, "Prepend"))
            v->add_space_prefix = true;
        cJSON_ArrayForEach(x, nl)
            if (is_type(x, "Prepend"))
                v->add_space_prefix = true;
        if (is_type(ptj, "Metaspace")) {
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(ptj, "prepend_scheme");
            v->add_space_prefix = !cJSON_IsString(ps) || strcmp(ps->valuestring, "never") != 0;
        }
    }
    if (!v->pre)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: pre_tokenizer of an unknown form (known: "
                          "ByteLevel, Digits+ByteLevel, the Llama 3 and Qwen2 Split regexes)", path);
    const cJSON *vo = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    if (!cJSON_IsObject(vo))
        return rvl_seterr(RVL_EFORMAT, "%s: model.vocab missing", path);
    /* size: the largest id + 1, or config's vocab_size when larger (padding) */
    double max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vo) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_VOCAB ||
            e->valuedouble != (double)(uint32_t)e->valuedouble)
            return rvl_seterr(RVL_EFORMAT, "%s: bad id of token '%s'", path, e->string);
        if (e->valuedouble > max_id) max_id = e->valuedouble;
    }
    cJSON_ArrayForEach(e, added) {
        double id;
        if (!jnum(e, "id", &id) || id < 0 || id >= MAX_VOCAB || id != (double)(uint32_t)id)
            return rvl_seterr(RVL_EFORMAT, "%s: bad added token id", path);
        if (id > max_id) max_id = id;
    }
    v->n = (uint32_t)(max_id + 1);
    if (h->n_vocab > v->n)
        v->n = h->n_vocab;
    if (v->n == 0)
        return rvl_seterr(RVL_EFORMAT, "%s: empty vocabulary", path);
    v->tok = calloc(v->n ? v->n : 1, sizeof *v->tok);
    v->type = calloc(v->n ? v->n : 1, sizeof *v->type);
    if (!v->tok || !v->type)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    const cJSON *unk_tok = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    cJSON_ArrayForEach(e, vo) {
        uint32_t id = (uint32_t)e->valuedouble;
        unsigned byte;
        char tail;
        free(v->tok[id]);
        v->tok[id] = strdup(e->string);
        v->type[id] = RVL_TOK_NORMAL;
        if (v->spm && strlen(e->string) == 6 && sscanf(e->string, "<0x%2X%c", &byte, &tail) == 2 &&
            tail == '>')
            v->type[id] = RVL_TOK_BYTE;
        if (v->spm && cJSON_IsString(unk_tok) && !strcmp(unk_tok->valuestring, e->string))
            v->type[id] = RVL_TOK_UNKNOWN;
        if (!v->tok[id])
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    cJSON_ArrayForEach(e, added) {
        double id = 0;
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(e, "content");
        jnum(e, "id", &id);
        if (!cJSON_IsString(ct))
            return rvl_seterr(RVL_EFORMAT, "%s: added token without content", path);
        uint32_t i = (uint32_t)id;
        free(v->tok[i]);
        v->tok[i] = strdup(ct->valuestring);
        v->type[i] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? RVL_TOK_CONTROL
                                                                                  : RVL_TOK_USER_DEFINED;
        if (v->spm && cJSON_IsString(unk_tok) && !strcmp(unk_tok->valuestring, ct->valuestring))
            v->type[i] = RVL_TOK_UNKNOWN;
        if (!v->tok[i])
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < v->n; i++) {
        if (v->tok[i])
            continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        v->tok[i] = strdup(pad);
        v->type[i] = RVL_TOK_UNUSED;
        if (!v->tok[i])
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if ((rc = read_merges(path, model, v)) < 0 ||
        (v->spm && (rc = spm_scores(v)) < 0))
        return rc;
    read_specials(tj, tc, cfg, unk_tok, v);
    return read_chat_template(dir, tc, v);
}

/* ======================================================================
 * Tensors
 * ====================================================================== */
typedef struct {
    const rvl_tensor_info *t;
    char name[64];
    uint32_t type;          /* output type */
    uint32_t perm;
} imp_tensor;

static int stream_tensor(rvl_gguf_writer *w, uint64_t idx, const imp_tensor *x, float *f32, void *obuf)
{
    const rvl_tensor_info *t = x->t;
    const rvl_kformat *kin = rvl_kformat_get(t->type), *kout = rvl_kformat_get(x->type);
    uint64_t row = t->ne[0], rows = row ? t->n_elements / row : 0;
    uint64_t in_row = rvl_kformat_row_bytes(kin, row), out_row = rvl_kformat_row_bytes(kout, row);
    uint64_t chunk = rvl_convert_chunk_rows(row, rows);
    for (uint64_t r = 0; r < rows; r += chunk) {
        uint64_t m = rows - r < chunk ? rows - r : chunk;
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        for (uint64_t k = 0; k < m; k++) {
            uint64_t s = x->perm ? rvl_hf_row(r + k, x->perm, rows) : r + k;
            const char *src = (const char *)t->data + s * in_row;
            if (t->type == x->type) {
                memcpy((char *)obuf + k * out_row, src, (size_t)in_row);
            } else {
                kin->dequantize(src, f32, (int64_t)row);
                kout->quantize(f32, (char *)obuf + k * out_row, (int64_t)row, NULL);
            }
        }
        int rc = rvl_gguf_writer_tensor_data(w, idx, obuf, m * out_row);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int write_import(const char *in, const char *dest, const rvl_file *st, const hparams *h,
                        const vocab *v)
{
    rvl_gguf_writer *w = NULL;
    imp_tensor *x = NULL;
    rvl_str *strs = NULL;
    float *f32 = NULL;
    void *obuf = NULL;
    int rc;
    uint64_t n = rvl_file_n_tensors(st), nx = 0, max_row = 1, max_chunk = 1;

    x = calloc(n ? n : 1, sizeof *x);
    if (!x) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(st, i);
        char s[256];
        snprintf(s, sizeof s, "%.*s", (int)(t->name.len > 255 ? 255 : t->name.len), t->name.ptr);
        int k = rvl_hf_tensor_name(h->arch, h->n_layer, h->n_head, h->n_head_kv, h->tied, s,
                                   x[nx].name, sizeof x[nx].name, &x[nx].perm);
        if (k == 0)
            continue;
        if (k < 0) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: no GGUF name for it", in, s);
            goto out;
        }
        if (t->type != RVL_TYPE_F32 && t->type != RVL_TYPE_F16 && t->type != RVL_TYPE_BF16) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: dtype %s (F32, F16 or BF16 expected)",
                            in, s, rvl_type_get(t->type) ? rvl_type_get(t->type)->name : "?");
            goto out;
        }
        if (t->n_dims < 1 || t->n_dims > 2 || t->ne[0] == 0) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: %u dimensions", in, s, t->n_dims);
            goto out;
        }
        if (x[nx].perm && (t->n_dims != 2 || t->ne[1] % x[nx].perm || (t->ne[1] / x[nx].perm) % 2)) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor %s: %llu rows do not split into %u heads", in,
                            s, (unsigned long long)(t->n_dims == 2 ? t->ne[1] : 1), x[nx].perm);
            goto out;
        }
        x[nx].t = t;
        x[nx].type = t->n_dims == 1 ? RVL_TYPE_F32 : t->type;
        uint64_t rb = t->ne[0] * 4, c = rvl_convert_chunk_rows(t->ne[0], t->n_elements / t->ne[0]) * t->ne[0];
        if (rb > max_row) max_row = rb;
        if (c > max_chunk) max_chunk = c;
        nx++;
    }
    if (!rvl_file_find_tensor(st, "model.embed_tokens.weight")) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: no model.embed_tokens.weight", in);
        goto out;
    }
    f32 = malloc((size_t)max_row);
    obuf = malloc((size_t)max_chunk * 4);
    strs = calloc(v->n > v->n_merges ? v->n : v->n_merges ? v->n_merges : 1, sizeof *strs);
    if (!f32 || !obuf || !strs) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }

    /* metadata, in convert_hf_to_gguf.py's order */
    char key[96], name[256], tmp[4096];
    const char *a = h->arch;
    snprintf(tmp, sizeof tmp, "%s", in);
    size_t tl = strlen(tmp);
    while (tl > 1 && tmp[tl - 1] == '/')
        tmp[--tl] = 0;
    snprintf(name, sizeof name, "%s", basename(tmp));
#define K(s) (snprintf(key, sizeof key, "%s.%s", a, s), key)
    if ((rc = rvl_gguf_writer_open(&w, dest)) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "general.architecture", a)) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "general.type", "model")) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "general.name", name)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("block_count"), h->n_layer)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("context_length"), h->n_ctx)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("embedding_length"), h->n_embd)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("feed_forward_length"), h->n_ff)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("attention.head_count"), h->n_head)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("attention.head_count_kv"), h->n_head_kv)) < 0 ||
        (rc = rvl_gguf_writer_kv_f32(w, K("rope.freq_base"), (float)h->rope_base)) < 0 ||
        (rc = rvl_gguf_writer_kv_f32(w, K("attention.layer_norm_rms_epsilon"), (float)h->eps)) < 0)
        goto out;
    if (h->head_dim != h->n_embd / h->n_head &&
        ((rc = rvl_gguf_writer_kv_u32(w, K("attention.key_length"), h->head_dim)) < 0 ||
         (rc = rvl_gguf_writer_kv_u32(w, K("attention.value_length"), h->head_dim)) < 0))
        goto out;
    if (h->rope_type &&
        ((rc = rvl_gguf_writer_kv_str(w, K("rope.scaling.type"), h->rope_type)) < 0 ||
         (rc = rvl_gguf_writer_kv_f32(w, K("rope.scaling.factor"), (float)h->rope_factor)) < 0 ||
         (h->rope_orig_ctx &&
          (rc = rvl_gguf_writer_kv_u32(w, K("rope.scaling.original_context_length"), h->rope_orig_ctx)) < 0)))
        goto out;
    if ((rc = rvl_gguf_writer_kv_u32(w, K("vocab_size"), v->n)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, K("rope.dimension_count"), h->head_dim)) < 0 ||
        (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos)) < 0 ||
        (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos)) < 0 ||
        (v->spm && (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_space_prefix",
                                                 v->add_space_prefix)) < 0) ||
        (rc = rvl_gguf_writer_kv_str(w, "tokenizer.ggml.model", v->spm ? "llama" : "gpt2")) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "tokenizer.ggml.pre", v->pre)) < 0)
        goto out;
#undef K
    for (uint32_t i = 0; i < v->n; i++)
        strs[i] = (rvl_str){v->tok[i], strlen(v->tok[i])};
    if ((rc = rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.tokens", strs, v->n)) < 0 ||
        (v->spm && (rc = rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", RVL_GGUF_F32, v->scores,
                                                v->n)) < 0) ||
        (rc = rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", RVL_GGUF_I32, v->type, v->n)) < 0)
        goto out;
    for (uint32_t i = 0; !v->spm && i < v->n_merges; i++)
        strs[i] = (rvl_str){v->merges[i], strlen(v->merges[i])};
    if (!v->spm && (rc = rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.merges", strs, v->n_merges)) < 0)
        goto out;
    static const char *const idk[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    const int64_t ids[] = {v->bos, v->eos, v->unk, v->pad};
    for (int i = 0; i < 4; i++)
        if (ids[i] >= 0 && (rc = rvl_gguf_writer_kv_u32(w, idk[i], (uint32_t)ids[i])) < 0)
            goto out;
    if (v->chat_template && (rc = rvl_gguf_writer_kv_str(w, "tokenizer.chat_template", v->chat_template)) < 0)
        goto out;
    if ((rc = rvl_gguf_writer_kv_u32(w, "general.quantization_version", RVL_GGML_QNT_VERSION)) < 0)
        goto out;

    for (uint64_t i = 0; i < nx; i++)
        if ((rc = rvl_gguf_writer_add_tensor(w, x[i].name, x[i].type, x[i].t->n_dims, x[i].t->ne, NULL)) < 0)
            goto out;
    if ((rc = rvl_gguf_writer_begin_data(w)) < 0)
        goto out;
    for (uint64_t i = 0; i < nx; i++)
        if ((rc = stream_tensor(w, i, &x[i], f32, obuf)) < 0) {
            if (rc != RVL_EINTR)
                rvl_preerr(rc, "%s: tensor %s", in, x[i].name);
            goto out;
        }
    rc = rvl_gguf_writer_finish(w);
    w = NULL;
out:
    rvl_gguf_writer_abort(w);
    free(x);
    free(strs);
    free(f32);
    free(obuf);
    return rc;
}

/* ======================================================================
 * The entry point: any input as an open GGUF
 * ====================================================================== */
int rvl_convert_open_input(const char *in, const char *out, rvl_file **fo)
{
    rvl_file *f = NULL, *g = NULL;
    cJSON *cfg = NULL, *tj = NULL, *tc = NULL;
    vocab v = {0};
    char dir[4096], dest[4200];
    int rc;

    *fo = NULL;
    if ((rc = rvl_file_open(&f, in)) < 0)
        return rc;
    if (rvl_file_fmt(f) == RVL_FMT_GGUF) {
        *fo = f;
        return 0;
    }
    /* safetensors: the model directory is IN, or the directory of IN */
    struct stat sb;
    snprintf(dir, sizeof dir, "%s", in);
    if (stat(in, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        char *d = dirname(dir);
        memmove(dir, d, strlen(d) + 1);
    }
    hparams h;
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    if ((rc = read_json(dir, "config.json", true, &cfg)) < 0 ||
        (rc = read_hparams(cpath, cfg, &h)) < 0 ||
        (rc = read_json(dir, "tokenizer.json", true, &tj)) < 0 ||
        (rc = read_json(dir, "tokenizer_config.json", false, &tc)) < 0 ||
        (rc = read_vocab(dir, tj, tc, cfg, &h, &v)) < 0)
        goto out;
    /* the import lives next to the output (same file system, room checked
     * by the writes) under a name nobody else uses */
    const char *o = out ? out : in;
    if (snprintf(dest, sizeof dest, "%s.import.XXXXXX", o) >= (int)sizeof dest) {
        rc = rvl_seterr(RVL_EINVAL, "%s: path too long", o);
        goto out;
    }
    int fd = mkstemp(dest);
    if (fd < 0) {
        rc = rvl_seterr(RVL_EIO, "%s: %s", dest, strerror(errno));
        goto out;
    }
    close(fd);
    if ((rc = write_import(in, dest, f, &h, &v)) < 0) {
        unlink(dest);
        goto out;
    }
    rc = rvl_file_open(&g, dest);
    unlink(dest);                 /* the mapping keeps the data */
    if (rc == 0)
        *fo = g;
out:
    cJSON_Delete(cfg);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    vocab_free(&v);
    rvl_file_close(f);
    return rc;
}

/* For the fuzz harness: the metadata half of the import from memory. */
int rvl_convert_hf_parse(const void *config, size_t n_config, const void *tokenizer,
                         size_t n_tokenizer, const void *tok_config, size_t n_tok_config)
{
    cJSON *cfg = NULL, *tj = NULL, *tc = NULL;
    vocab v = {0};
    hparams h;
    int rc;
    if ((rc = parse_json("config.json", config, n_config, &cfg)) < 0 ||
        (rc = read_hparams("config.json", cfg, &h)) < 0 ||
        (rc = parse_json("tokenizer.json", tokenizer, n_tokenizer, &tj)) < 0 ||
        (rc = parse_json("tokenizer_config.json", tok_config, n_tok_config, &tc)) < 0 ||
        (rc = read_vocab("/nonexistent", tj, tc, cfg, &h, &v)) < 0)
        goto out;
    if (v.n == 0 || !v.tok[v.n - 1])
        rc = rvl_seterr(RVL_EFORMAT, "empty vocabulary");
out:
    cJSON_Delete(cfg);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    vocab_free(&v);
    return rc;
}
