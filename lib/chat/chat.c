/*
 * chat.c - chat formatting: the model's own Jinja2 chat template
 * rendered by lib/chat/jinja/, family detection by marker substrings,
 * built-in formatters per family (the fallback when a template cannot be
 * parsed or rendered, and what --chat-template NAME selects), end-of-turn
 * strings, and conversations read from JSON files.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat/jinja/jinja.h"
#include "ruvllm.h"

struct rvl_chat_tmpl {
    jtmpl *t;
};

/* ======================================================================
 * Templates
 * ====================================================================== */

int rvl_chat_tmpl_open(rvl_chat_tmpl **out, const char *src, size_t len, const char *name)
{
    *out = NULL;
    if (!src) return rvl_seterr(RVL_EINVAL, "%s: no template text", name ? name : "template");
    rvl_chat_tmpl *c = calloc(1, sizeof *c);
    if (!c) return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = jinja_parse(&c->t, src, len, name);
    if (rc) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rvl_chat_tmpl_close(rvl_chat_tmpl *t)
{
    if (!t) return;
    jinja_free(t->t);
    free(t);
}

static jv mkstr(jarena *ar, const char *s)
{
    size_t n = strlen(s);
    return jv_strn(ja_strndup(ar, s, n), n);
}

static void ctx_set(jarena *ar, jkv **d, size_t *n, size_t *cap, const char *k, jv v)
{
    for (size_t i = 0; i < *n; i++)
        if ((*d)[i].k.n == strlen(k) && !memcmp((*d)[i].k.s, k, (*d)[i].k.n)) {
            (*d)[i].v = v;
            return;
        }
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        jkv *nd = ja_alloc(ar, nc * sizeof *nd);
        if (*n) memcpy(nd, *d, *n * sizeof *nd);
        *d = nd;
        *cap = nc;
    }
    (*d)[*n].k = mkstr(ar, k);
    (*d)[*n].v = v;
    (*n)++;
}

int rvl_chat_tmpl_render_ex(const rvl_chat_tmpl *t, const rvl_chat_render_opts *o,
                            char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    jarena ar = {0};
    jmp_buf jb;
    ar.oom = &jb;
    if (setjmp(jb)) {
        ja_free(&ar);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", t->t->name);
    }
    jkv *d = NULL;
    size_t n = 0, cap = 0;
    jv *msgs = ja_alloc(&ar, (o->n_msgs + 1) * sizeof *msgs);
    for (size_t i = 0; i < o->n_msgs; i++) {
        jkv *m = ja_alloc(&ar, 2 * sizeof *m);
        m[0].k = mkstr(&ar, "role");
        m[0].v = mkstr(&ar, o->msgs[i].role ? o->msgs[i].role : "");
        m[1].k = mkstr(&ar, "content");
        m[1].v = o->msgs[i].content ? mkstr(&ar, o->msgs[i].content) : jv_none();
        msgs[i] = jv_dict(m, 2);
    }
    /* what transformers passes: messages, tools=None, documents=None,
     * add_generation_prompt, and the special tokens */
    ctx_set(&ar, &d, &n, &cap, "messages", jv_list(msgs, o->n_msgs));
    ctx_set(&ar, &d, &n, &cap, "tools", jv_none());
    ctx_set(&ar, &d, &n, &cap, "documents", jv_none());
    ctx_set(&ar, &d, &n, &cap, "add_generation_prompt", jv_bool(o->add_generation_prompt));
    if (o->bos_token) ctx_set(&ar, &d, &n, &cap, "bos_token", mkstr(&ar, o->bos_token));
    if (o->eos_token) ctx_set(&ar, &d, &n, &cap, "eos_token", mkstr(&ar, o->eos_token));
    if (o->context_json) {
        jv extra;
        int rc = jinja_from_json(&ar, o->context_json, strlen(o->context_json), &extra);
        if (rc) {
            ja_free(&ar);
            return rvl_preerr(rc, "%s: context", t->t->name);
        }
        if (extra.t != JV_DICT) {
            ja_free(&ar);
            return rvl_seterr(RVL_EINVAL, "%s: context JSON is not an object", t->t->name);
        }
        for (size_t i = 0; i < extra.n; i++)
            ctx_set(&ar, &d, &n, &cap, ja_strndup(&ar, extra.d[i].k.s, extra.d[i].k.n), extra.d[i].v);
    }
    ar.oom = NULL;
    jlimits lim = JINJA_DEFAULT_LIMITS;
    if (o->limit_ops) lim.max_ops = o->limit_ops;
    if (o->limit_output) lim.max_output = o->limit_output;
    if (o->limit_memory) lim.max_memory = o->limit_memory;
    int rc = jinja_render(t->t, &ar, jv_dict(d, n), o->use_now ? o->now : INT64_MIN, &lim, out, out_len);
    ja_free(&ar);
    return rc;
}

int rvl_chat_tmpl_render(const rvl_chat_tmpl *t, const rvl_chat_msg *msgs, size_t n,
                         bool add_generation_prompt, const char *bos_token, const char *eos_token,
                         char **out)
{
    rvl_chat_render_opts o = {
        .msgs = msgs, .n_msgs = n, .add_generation_prompt = add_generation_prompt,
        .bos_token = bos_token, .eos_token = eos_token,
    };
    return rvl_chat_tmpl_render_ex(t, &o, out, NULL);
}

/* ======================================================================
 * Families
 * ====================================================================== */

static const struct {
    const char *name;
    const char *const stops[4];
} FAMILIES[RVL_CHAT_FAMILY_COUNT] = {
    [RVL_CHAT_UNKNOWN] = {"unknown", {NULL}},
    [RVL_CHAT_CHATML] = {"chatml", {"<|im_end|>", NULL}},
    [RVL_CHAT_LLAMA2] = {"llama2", {"</s>", NULL}},
    [RVL_CHAT_LLAMA3] = {"llama3", {"<|eot_id|>", "<|eom_id|>", NULL}},
    [RVL_CHAT_MISTRAL_V1] = {"mistral-v1", {"</s>", NULL}},
    [RVL_CHAT_MISTRAL_V3] = {"mistral-v3", {"</s>", NULL}},
    [RVL_CHAT_MISTRAL_V3_TEKKEN] = {"mistral-v3-tekken", {"</s>", NULL}},
    [RVL_CHAT_MISTRAL_V7] = {"mistral-v7", {"</s>", NULL}},
    [RVL_CHAT_MISTRAL_V7_TEKKEN] = {"mistral-v7-tekken", {"</s>", NULL}},
    [RVL_CHAT_GEMMA] = {"gemma", {"<end_of_turn>", NULL}},
    [RVL_CHAT_PHI3] = {"phi3", {"<|end|>", "<|endoftext|>", NULL}},
    [RVL_CHAT_PHI4] = {"phi4", {"<|im_end|>", NULL}},
    [RVL_CHAT_ZEPHYR] = {"zephyr", {"</s>", NULL}},
    [RVL_CHAT_DEEPSEEK2] = {"deepseek2", {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL}},
    [RVL_CHAT_DEEPSEEK3] = {"deepseek3", {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL}},
    [RVL_CHAT_DEEPSEEK_R1] = {"deepseek-r1", {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL}},
    [RVL_CHAT_COMMAND_R] = {"command-r", {"<|END_OF_TURN_TOKEN|>", NULL}},
    [RVL_CHAT_GRANITE] = {"granite", {"<|end_of_text|>", NULL}},
    [RVL_CHAT_VICUNA] = {"vicuna", {"</s>", NULL}},
    [RVL_CHAT_VICUNA_ORCA] = {"vicuna-orca", {"</s>", NULL}},
    [RVL_CHAT_QWEN3] = {"qwen3", {"<|im_end|>", NULL}},
    /* harmony: <|end|> closes a message, not the reply (llama.cpp: EOG are
     * <|return|> and <|call|>) */
    [RVL_CHAT_GPT_OSS] = {"gpt-oss", {"<|return|>", "<|call|>", NULL}},
};

const char *rvl_chat_family_name(rvl_chat_family f)
{
    return (unsigned)f < RVL_CHAT_FAMILY_COUNT ? FAMILIES[f].name : "unknown";
}

rvl_chat_family rvl_chat_family_from_name(const char *name)
{
    if (!name) return RVL_CHAT_UNKNOWN;
    for (int f = 1; f < RVL_CHAT_FAMILY_COUNT; f++)
        if (!strcmp(FAMILIES[f].name, name)) return (rvl_chat_family)f;
    return RVL_CHAT_UNKNOWN;
}

const char *const *rvl_chat_stop_strings(rvl_chat_family f)
{
    static const char *const none[] = {NULL};
    return (unsigned)f < RVL_CHAT_FAMILY_COUNT ? FAMILIES[f].stops : none;
}

#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

rvl_chat_family rvl_chat_detect(const char *src)
{
    if (!src) return RVL_CHAT_UNKNOWN;
#define HAS(s) (strstr(src, s) != NULL)
    if (HAS("<|start|>") && HAS("<|channel|>")) return RVL_CHAT_GPT_OSS;
    if (HAS("<|im_sep|>")) return RVL_CHAT_PHI4;
    if (HAS("<|im_start|>")) return HAS("enable_thinking") ? RVL_CHAT_QWEN3 : RVL_CHAT_CHATML;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) return RVL_CHAT_LLAMA3;
    if (HAS("<start_of_turn>")) return RVL_CHAT_GEMMA;
    if (HAS(DS_USER) && HAS(DS_ASSISTANT)) return HAS("</think>") ? RVL_CHAT_DEEPSEEK_R1 : RVL_CHAT_DEEPSEEK3;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>")) return RVL_CHAT_COMMAND_R;
    if (HAS("<|start_of_role|>")) return RVL_CHAT_GRANITE;
    if (HAS("[SYSTEM_PROMPT]"))
        return HAS("'[INST]'") || HAS("\"[INST]\"") ? RVL_CHAT_MISTRAL_V7_TEKKEN : RVL_CHAT_MISTRAL_V7;
    if (HAS("[AVAILABLE_TOOLS]") || HAS("[TOOL_CALLS]"))
        return HAS("\"[INST] \"") || HAS("'[INST] '") ? RVL_CHAT_MISTRAL_V3 : RVL_CHAT_MISTRAL_V3_TEKKEN;
    if (HAS("[INST]"))
        return HAS("<<SYS>>") || !HAS("' [INST] '") ? RVL_CHAT_LLAMA2 : RVL_CHAT_MISTRAL_V1;
    if (HAS("<|assistant|>") && HAS("<|end|>")) return RVL_CHAT_PHI3;
    if (HAS("<|user|>") && HAS("<|assistant|>") && HAS("eos_token")) return RVL_CHAT_ZEPHYR;
    if (HAS("'User: '") && HAS("Assistant:")) return RVL_CHAT_DEEPSEEK2;
    if (HAS("USER: ") && HAS("ASSISTANT: ")) return HAS("SYSTEM: ") ? RVL_CHAT_VICUNA_ORCA : RVL_CHAT_VICUNA;
#undef HAS
    return RVL_CHAT_UNKNOWN;
}

/* ---------------------------------------------------------------- built-ins */

/* A conversation as the built-in formatters see it. */
typedef struct {
    rvl_chat_family f;
    const rvl_chat_msg *msgs;
    size_t n;
    bool add_gen;              /* end with the assistant's turn opened */
    const char *bos, *eos;     /* never NULL */
    const char *sys;           /* the first message's content when it is a system message */
    size_t first;              /* the first message after that system message */
    int think;                 /* enable_thinking: -1 undefined, 0 false, 1 true */
    const char *effort;        /* reasoning_effort (gpt-oss); NULL: undefined */
} conv;

static bool is_sp(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
/* s without ASCII whitespace at either end, what |trim and .strip() do for
 * usual text (NULL: nothing) */
static void add_trimmed(rvl_buf *b, const char *s)
{
    if (!s) return;
    size_t n = strlen(s), a = 0;
    while (a < n && is_sp(s[a])) a++;
    while (n > a && is_sp(s[n - 1])) n--;
    rvl_buf_add(b, s + a, n - a);
}

static bool role_is(const rvl_chat_msg *m, const char *r) { return m->role && !strcmp(m->role, r); }

/* Each formatter appends the conversation to b; an allocation failure
 * stays in b->oom. */

static void fmt_chatml(rvl_buf *b, const conv *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rvl_buf_adds(b, "<|im_start|>"); rvl_buf_adds(b, c->msgs[i].role); rvl_buf_adds(b, "\n");
        rvl_buf_adds(b, c->msgs[i].content); rvl_buf_adds(b, "<|im_end|>\n");
    }
    if (c->add_gen) rvl_buf_adds(b, "<|im_start|>assistant\n");
}

/* s[0..n) without the characters of `set` at the start (lead) and/or end */
static void strip_set(const char **s, size_t *n, const char *set, bool lead, bool trail)
{
    while (lead && *n && strchr(set, (*s)[0])) { (*s)++; (*n)--; }
    while (trail && *n && strchr(set, (*s)[*n - 1])) (*n)--;
}

/* Qwen3: ChatML; an assistant turn after the last user turn keeps its
 * reasoning as <think>\n...\n</think>\n\n (an earlier one loses it), the
 * reasoning being what its content has before </think>; enable_thinking
 * false closes an empty think block after the generation prompt. */
static void fmt_qwen3(rvl_buf *b, const conv *c)
{
    size_t last_query = c->n ? c->n - 1 : 0;
    for (size_t i = c->n; i-- > 0;)
        if (role_is(&c->msgs[i], "user")) { last_query = i; break; }
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        const char *txt = m->content ? m->content : "";
        if (!role_is(m, "assistant")) {
            rvl_buf_adds(b, "<|im_start|>"); rvl_buf_adds(b, m->role); rvl_buf_adds(b, "\n");
            rvl_buf_adds(b, txt); rvl_buf_adds(b, "<|im_end|>\n");
            continue;
        }
        const char *content = txt, *reason = "";
        size_t cn = strlen(txt), rn = 0;
        const char *end = strstr(txt, "</think>");
        if (end) {
            const char *last = end;
            while ((end = strstr(last + 8, "</think>"))) last = end;
            content = last + 8;
            cn = strlen(content);
            strip_set(&content, &cn, "\n", true, false);
            /* split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
            size_t head = (size_t)(strstr(txt, "</think>") - txt);
            reason = txt;
            rn = head;
            strip_set(&reason, &rn, "\n", false, true);
            for (const char *o; (o = memmem(reason, rn, "<think>", 7));) {
                rn -= (size_t)(o + 7 - reason);
                reason = o + 7;
            }
            strip_set(&reason, &rn, "\n", true, false);
        }
        rvl_buf_adds(b, "<|im_start|>assistant\n");
        if (i > last_query && (i + 1 == c->n || rn)) {
            strip_set(&reason, &rn, "\n", true, true);
            rvl_buf_adds(b, "<think>\n"); rvl_buf_add(b, reason, rn); rvl_buf_adds(b, "\n</think>\n\n");
            strip_set(&content, &cn, "\n", true, false);
        }
        rvl_buf_add(b, content, cn);
        rvl_buf_adds(b, "<|im_end|>\n");
    }
    if (c->add_gen) {
        rvl_buf_adds(b, "<|im_start|>assistant\n");
        if (c->think == 0) rvl_buf_adds(b, "<think>\n\n</think>\n\n");
    }
}

static void fmt_phi4(rvl_buf *b, const conv *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "assistant")) { rvl_buf_adds(b, m->content); rvl_buf_adds(b, "<|im_end|>"); continue; }
        rvl_buf_adds(b, "<|im_start|>"); rvl_buf_adds(b, m->role); rvl_buf_adds(b, "<|im_sep|>");
        rvl_buf_adds(b, m->content); rvl_buf_adds(b, "<|im_end|>");
        if (role_is(m, "user")) rvl_buf_adds(b, "<|im_start|>assistant<|im_sep|>");
    }
}

static void fmt_llama2(rvl_buf *b, const conv *c)
{
    for (size_t i = c->first; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (!role_is(m, "user")) {
            rvl_buf_adds(b, " "); add_trimmed(b, m->content); rvl_buf_adds(b, " "); rvl_buf_adds(b, c->eos);
            continue;
        }
        rvl_buf_adds(b, c->bos); rvl_buf_adds(b, "[INST] ");
        if (i == c->first && c->sys) {   /* the system message joins the first user's, trimmed as one */
            rvl_buf s = {0};
            rvl_buf_adds(&s, "<<SYS>>\n"); rvl_buf_adds(&s, c->sys); rvl_buf_adds(&s, "\n<</SYS>>\n\n");
            rvl_buf_adds(&s, m->content);
            if (s.oom) b->oom = true;
            add_trimmed(b, s.p);
            rvl_buf_free(&s);
        } else {
            add_trimmed(b, m->content);
        }
        rvl_buf_adds(b, " [/INST]");
    }
}

static void fmt_llama3(rvl_buf *b, const conv *c)
{
    rvl_buf_adds(b, c->bos);
    for (size_t i = 0; i < c->n; i++) {
        rvl_buf_adds(b, "<|start_header_id|>"); rvl_buf_adds(b, c->msgs[i].role); rvl_buf_adds(b, "<|end_header_id|>\n\n");
        add_trimmed(b, c->msgs[i].content); rvl_buf_adds(b, "<|eot_id|>");
    }
    if (c->add_gen) rvl_buf_adds(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void fmt_mistral_v1(rvl_buf *b, const conv *c)
{
    rvl_buf_adds(b, c->bos);
    for (size_t i = c->first; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "user")) {
            rvl_buf_adds(b, " [INST] ");
            if (i == c->first && c->sys) { rvl_buf_adds(b, c->sys); rvl_buf_adds(b, "\n\n"); }
            rvl_buf_adds(b, m->content); rvl_buf_adds(b, " [/INST]");
        } else {
            rvl_buf_adds(b, " "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, c->eos);
        }
    }
}

/* mistral-v3 and mistral-v3-tekken */
static void fmt_mistral_v3(rvl_buf *b, const conv *c)
{
    const bool tekken = c->f == RVL_CHAT_MISTRAL_V3_TEKKEN;
    size_t last_user = c->n;
    for (size_t i = c->first; i < c->n; i++) if (role_is(&c->msgs[i], "user")) last_user = i;
    rvl_buf_adds(b, c->bos);
    for (size_t i = c->first; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "user")) {
            rvl_buf_adds(b, tekken ? "[INST]" : "[INST] ");
            /* the template puts the system message before the last message when it is a user's */
            if (c->sys && i == c->n - 1 && i == last_user) { rvl_buf_adds(b, c->sys); rvl_buf_adds(b, "\n\n"); }
            rvl_buf_adds(b, m->content); rvl_buf_adds(b, "[/INST]");
        } else if (tekken) {
            rvl_buf_adds(b, m->content); rvl_buf_adds(b, c->eos);
        } else {
            rvl_buf_adds(b, " "); add_trimmed(b, m->content); rvl_buf_adds(b, c->eos);
        }
    }
}

/* mistral-v7 and mistral-v7-tekken */
static void fmt_mistral_v7(rvl_buf *b, const conv *c)
{
    const bool tekken = c->f == RVL_CHAT_MISTRAL_V7_TEKKEN;
    rvl_buf_adds(b, c->bos);
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "system")) {
            rvl_buf_adds(b, tekken ? "[SYSTEM_PROMPT]" : "[SYSTEM_PROMPT] "); rvl_buf_adds(b, m->content);
            rvl_buf_adds(b, "[/SYSTEM_PROMPT]");
        } else if (role_is(m, "user")) {
            rvl_buf_adds(b, tekken ? "[INST]" : "[INST] "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, "[/INST]");
        } else {
            if (!tekken) rvl_buf_adds(b, " ");
            rvl_buf_adds(b, m->content); rvl_buf_adds(b, c->eos);
        }
    }
}

static void fmt_gemma(rvl_buf *b, const conv *c)
{
    rvl_buf_adds(b, c->bos);
    for (size_t i = c->first; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        rvl_buf_adds(b, "<start_of_turn>"); rvl_buf_adds(b, role_is(m, "assistant") ? "model" : m->role); rvl_buf_adds(b, "\n");
        if (i == c->first && c->sys) { rvl_buf_adds(b, c->sys); rvl_buf_adds(b, "\n\n"); }
        add_trimmed(b, m->content); rvl_buf_adds(b, "<end_of_turn>\n");
    }
    if (c->add_gen) rvl_buf_adds(b, "<start_of_turn>model\n");
}

static void fmt_phi3(rvl_buf *b, const conv *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "system") && !(m->content && *m->content)) continue;
        rvl_buf_adds(b, "<|"); rvl_buf_adds(b, m->role); rvl_buf_adds(b, "|>\n"); rvl_buf_adds(b, m->content);
        rvl_buf_adds(b, "<|end|>\n");
    }
    rvl_buf_adds(b, c->add_gen ? "<|assistant|>\n" : c->eos);
}

static void fmt_zephyr(rvl_buf *b, const conv *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rvl_buf_adds(b, "<|"); rvl_buf_adds(b, c->msgs[i].role); rvl_buf_adds(b, "|>\n"); rvl_buf_adds(b, c->msgs[i].content);
        rvl_buf_adds(b, c->eos); rvl_buf_adds(b, "\n");
    }
    if (c->add_gen) rvl_buf_adds(b, "<|assistant|>\n");
}

static void fmt_deepseek2(rvl_buf *b, const conv *c)
{
    rvl_buf_adds(b, c->bos);
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "user")) { rvl_buf_adds(b, "User: "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, "\n\n"); }
        else if (role_is(m, "assistant")) { rvl_buf_adds(b, "Assistant: "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, c->eos); }
        else if (role_is(m, "system")) { rvl_buf_adds(b, m->content); rvl_buf_adds(b, "\n\n"); }
    }
    if (c->add_gen) rvl_buf_adds(b, "Assistant:");
}

/* deepseek3 and deepseek-r1: the system messages first, then the turns */
static void fmt_deepseek3(rvl_buf *b, const conv *c)
{
    const bool r1 = c->f == RVL_CHAT_DEEPSEEK_R1;
    rvl_buf_adds(b, c->bos);
    bool firstsys = true;
    for (size_t i = 0; i < c->n; i++)
        if (role_is(&c->msgs[i], "system")) {
            if (!firstsys && !r1) rvl_buf_adds(b, "\n\n");
            if (r1 && !firstsys) continue;   /* R1 keeps one */
            rvl_buf_adds(b, c->msgs[i].content);
            firstsys = false;
        }
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "user")) { rvl_buf_adds(b, DS_USER); rvl_buf_adds(b, m->content); }
        else if (role_is(m, "assistant")) {
            const char *s = m->content ? m->content : "";
            if (r1) {   /* the reasoning before the last </think> is dropped */
                const char *t, *last = NULL;
                for (t = strstr(s, "</think>"); t; t = strstr(t + 1, "</think>")) last = t;
                if (last) s = last + 8;
            }
            rvl_buf_adds(b, DS_ASSISTANT); rvl_buf_adds(b, s); rvl_buf_adds(b, DS_EOS);
        }
    }
    if (c->add_gen) rvl_buf_adds(b, r1 ? DS_ASSISTANT "<think>\n" : DS_ASSISTANT);
}

static void fmt_command_r(rvl_buf *b, const conv *c)
{
    rvl_buf_adds(b, c->bos);
    if (c->sys) {
        rvl_buf_adds(b, "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>"); rvl_buf_adds(b, c->sys);
        rvl_buf_adds(b, "<|END_OF_TURN_TOKEN|>");
    }
    for (size_t i = c->first; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "user")) rvl_buf_adds(b, "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>");
        else if (role_is(m, "assistant")) rvl_buf_adds(b, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
        else continue;
        add_trimmed(b, m->content); rvl_buf_adds(b, "<|END_OF_TURN_TOKEN|>");
    }
    if (c->add_gen) rvl_buf_adds(b, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
}

static void fmt_granite(rvl_buf *b, const conv *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rvl_buf_adds(b, "<|start_of_role|>"); rvl_buf_adds(b, c->msgs[i].role); rvl_buf_adds(b, "<|end_of_role|>");
        rvl_buf_adds(b, c->msgs[i].content); rvl_buf_adds(b, "<|end_of_text|>\n");
    }
    if (c->add_gen && c->n) rvl_buf_adds(b, "<|start_of_role|>assistant<|end_of_role|>");
}

/* vicuna and vicuna-orca */
static void fmt_vicuna(rvl_buf *b, const conv *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        if (role_is(m, "system")) {
            if (c->f == RVL_CHAT_VICUNA_ORCA) { rvl_buf_adds(b, "SYSTEM: "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, "\n"); }
            else { rvl_buf_adds(b, m->content); rvl_buf_adds(b, "\n\n"); }
        } else if (role_is(m, "user")) {
            rvl_buf_adds(b, "USER: "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, "\n");
        } else {
            rvl_buf_adds(b, "ASSISTANT: "); rvl_buf_adds(b, m->content); rvl_buf_adds(b, "</s>\n");
        }
    }
    if (c->add_gen) rvl_buf_adds(b, "ASSISTANT:");
}

/* gpt-oss's harmony format, as its template writes a plain conversation:
 * a system message with the model identity, knowledge cutoff, today's date
 * (local time, as transformers' strftime_now) and the reasoning effort; a
 * leading system or developer message as the developer's instructions;
 * assistant turns on the final channel (the last one, when no generation
 * prompt follows, ending in <|return|>). */
static void fmt_gpt_oss(rvl_buf *b, const conv *c)
{
    char date[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d", &tm);
    rvl_buf_adds(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                    "Knowledge cutoff: 2024-06\nCurrent date: ");
    rvl_buf_adds(b, date);
    rvl_buf_adds(b, "\n\nReasoning: ");
    rvl_buf_adds(b, c->effort ? c->effort : "medium");
    rvl_buf_adds(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
                    "every message.<|end|>");
    size_t first = 0;
    if (c->n && (role_is(&c->msgs[0], "system") || role_is(&c->msgs[0], "developer"))) {
        first = 1;
        if (c->msgs[0].content && *c->msgs[0].content) {
            rvl_buf_adds(b, "<|start|>developer<|message|># Instructions\n\n");
            rvl_buf_adds(b, c->msgs[0].content);
            rvl_buf_adds(b, "\n\n<|end|>");
        }
    }
    for (size_t i = first; i < c->n; i++) {
        const rvl_chat_msg *m = &c->msgs[i];
        const char *content = m->content ? m->content : "";
        if (role_is(m, "user")) {
            rvl_buf_adds(b, "<|start|>user<|message|>"); rvl_buf_adds(b, content); rvl_buf_adds(b, "<|end|>");
        } else if (role_is(m, "assistant")) {
            rvl_buf_adds(b, "<|start|>assistant<|channel|>final<|message|>"); rvl_buf_adds(b, content);
            rvl_buf_adds(b, i + 1 == c->n && !c->add_gen ? "<|return|>" : "<|end|>");
        }
    }
    if (c->add_gen) rvl_buf_adds(b, "<|start|>assistant");
}

static void (*const FORMATTERS[RVL_CHAT_FAMILY_COUNT])(rvl_buf *b, const conv *c) = {
    [RVL_CHAT_CHATML] = fmt_chatml,
    [RVL_CHAT_PHI4] = fmt_phi4,
    [RVL_CHAT_LLAMA2] = fmt_llama2,
    [RVL_CHAT_LLAMA3] = fmt_llama3,
    [RVL_CHAT_MISTRAL_V1] = fmt_mistral_v1,
    [RVL_CHAT_MISTRAL_V3] = fmt_mistral_v3,
    [RVL_CHAT_MISTRAL_V3_TEKKEN] = fmt_mistral_v3,
    [RVL_CHAT_MISTRAL_V7] = fmt_mistral_v7,
    [RVL_CHAT_MISTRAL_V7_TEKKEN] = fmt_mistral_v7,
    [RVL_CHAT_GEMMA] = fmt_gemma,
    [RVL_CHAT_PHI3] = fmt_phi3,
    [RVL_CHAT_ZEPHYR] = fmt_zephyr,
    [RVL_CHAT_DEEPSEEK2] = fmt_deepseek2,
    [RVL_CHAT_DEEPSEEK3] = fmt_deepseek3,
    [RVL_CHAT_DEEPSEEK_R1] = fmt_deepseek3,
    [RVL_CHAT_COMMAND_R] = fmt_command_r,
    [RVL_CHAT_GRANITE] = fmt_granite,
    [RVL_CHAT_VICUNA] = fmt_vicuna,
    [RVL_CHAT_VICUNA_ORCA] = fmt_vicuna,
    [RVL_CHAT_QWEN3] = fmt_qwen3,
    [RVL_CHAT_GPT_OSS] = fmt_gpt_oss,
};

static int builtin_render(rvl_chat_family f, const rvl_chat_msg *msgs, size_t n, bool add_gen,
                          const char *bos, const char *eos, int think, const char *effort, char **out)
{
    *out = NULL;
    if ((unsigned)f >= RVL_CHAT_FAMILY_COUNT || !FORMATTERS[f])
        return rvl_seterr(RVL_EINVAL, "no built-in chat format '%s'", rvl_chat_family_name(f));
    const char *sys = n && role_is(&msgs[0], "system") ? msgs[0].content : NULL;
    const conv c = {
        .f = f, .msgs = msgs, .n = n, .add_gen = add_gen,
        .bos = bos ? bos : "", .eos = eos ? eos : "",
        .sys = sys, .first = sys ? 1 : 0, .think = think, .effort = effort,
    };
    rvl_buf b = {0};
    FORMATTERS[f](&b, &c);
    *out = rvl_buf_take(&b);   /* "" for nothing */
    return *out ? 0 : rvl_seterr(RVL_ENOMEM, "out of memory");
}

int rvl_chat_builtin_render(rvl_chat_family f, const rvl_chat_msg *msgs, size_t n,
                            bool add_gen, const char *bos, const char *eos, char **out)
{
    return builtin_render(f, msgs, n, add_gen, bos, eos, -1, NULL, out);
}

/* ======================================================================
 * Chat formatting with fallback
 * ====================================================================== */

struct rvl_chat {
    rvl_chat_tmpl *tmpl;       /* NULL: built-in formatter */
    rvl_chat_family family;
    int think;                 /* enable_thinking: -1 undefined, 0 false, 1 true */
    char effort[16];           /* reasoning_effort (gpt-oss); "": undefined */
    bool writes_think;         /* the template's text has <think> or </think> */
    char *bos, *eos;
    char desc[300];
};

static char *dupz(const char *s) { return s ? strdup(s) : NULL; }

static char *warnf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *warnf(const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

static int read_file(const char *path, char **data, size_t *len)
{
    int fd, rc = rvl_input_open(path, &fd, NULL);   /* a FIFO is refused, not waited on */
    if (rc < 0)
        return rc;
    rc = rvl_input_read_fd(fd, path, rvl_input_limit(), data, len);
    close(fd);
    return rc;
}

int rvl_chat_open(rvl_chat **out, const char *model_tmpl, size_t len, const char *override,
                  const char *bos_token, const char *eos_token, char **warning)
{
    *out = NULL;
    if (warning) *warning = NULL;
    rvl_chat *c = calloc(1, sizeof *c);
    if (!c) return rvl_seterr(RVL_ENOMEM, "out of memory");
    c->think = -1;
    c->bos = dupz(bos_token);
    c->eos = dupz(eos_token);
    if ((bos_token && !c->bos) || (eos_token && !c->eos)) {
        rvl_chat_close(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if (override && *override) {
        rvl_chat_family f = rvl_chat_family_from_name(override);
        if (f != RVL_CHAT_UNKNOWN) {
            c->family = f;
            snprintf(c->desc, sizeof c->desc, "built-in %s", rvl_chat_family_name(f));
            *out = c;
            return 0;
        }
        char *data;
        size_t n;
        int rc = read_file(override, &data, &n);
        if (rc) {
            rvl_chat_close(c);
            if (rc == RVL_ENOTFOUND)
                return rvl_seterr(RVL_ENOTFOUND, "chat template '%s': neither a format name nor a file", override);
            return rc;
        }
        rc = rvl_chat_tmpl_open(&c->tmpl, data, n, override);
        c->family = rvl_chat_detect(data);
        c->writes_think = memmem(data, n, "<think>", 7) || memmem(data, n, "</think>", 8);
        free(data);
        if (rc) {
            rvl_chat_close(c);
            return rc;
        }
        snprintf(c->desc, sizeof c->desc, "template file %s", override);
        *out = c;
        return 0;
    }
    if (!model_tmpl) {
        c->family = RVL_CHAT_CHATML;
        snprintf(c->desc, sizeof c->desc, "built-in chatml");
        if (warning) *warning = warnf("the model has no chat template: using chatml");
        *out = c;
        return 0;
    }
    /* the detection reads a NUL-terminated copy */
    char *z = malloc(len + 1);
    if (!z) {
        rvl_chat_close(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    memcpy(z, model_tmpl, len);
    z[len] = 0;
    c->family = rvl_chat_detect(z);
    c->writes_think = strstr(z, "<think>") || strstr(z, "</think>");
    free(z);
    int rc = rvl_chat_tmpl_open(&c->tmpl, model_tmpl, len, "chat template");
    if (rc) {
        rvl_chat_family f = c->family ? c->family : RVL_CHAT_CHATML;
        if (warning)
            *warning = warnf("%s; using the built-in %s format", rvl_errmsg(), rvl_chat_family_name(f));
        c->family = f;
        snprintf(c->desc, sizeof c->desc, "built-in %s (the model's template failed to parse)", rvl_chat_family_name(f));
    } else {
        snprintf(c->desc, sizeof c->desc, "model template (%s)", rvl_chat_family_name(c->family));
    }
    *out = c;
    return 0;
}

int rvl_chat_open_model(rvl_chat **out, const rvl_file *f, const rvl_tokenizer *tok,
                        const char *override, char **warning)
{
    rvl_str tmpl = {0};
    const rvl_kv *kv = f ? rvl_file_find_kv(f, "tokenizer.chat_template") : NULL;
    if (kv && rvl_kv_get_str(kv, &tmpl)) tmpl.ptr = NULL;
    char bos[256] = "", eos[256] = "";
    bool has_bos = false, has_eos = false;
    if (tok) {
        size_t n;
        const char *s;
        if (rvl_tok_bos(tok) != RVL_TOK_NULL && (s = rvl_tok_text(tok, rvl_tok_bos(tok), &n)) && n < sizeof bos) {
            memcpy(bos, s, n);
            bos[n] = 0;
            has_bos = true;
        }
        if (rvl_tok_eos(tok) != RVL_TOK_NULL && (s = rvl_tok_text(tok, rvl_tok_eos(tok), &n)) && n < sizeof eos) {
            memcpy(eos, s, n);
            eos[n] = 0;
            has_eos = true;
        }
    }
    int rc = rvl_chat_open(out, tmpl.ptr, tmpl.ptr ? (size_t)tmpl.len : 0, override,
                           has_bos ? bos : "", has_eos ? eos : "", warning);
    if (rc || tmpl.ptr || (override && *override) || !tok) return rc;
    /* no template: pick the family from the vocabulary's special tokens */
    static const struct { const char *tok; rvl_chat_family f; } VOCAB[] = {
        {"<|channel|>", RVL_CHAT_GPT_OSS},   /* before <|end|>: harmony has it too */
        {"<|im_sep|>", RVL_CHAT_PHI4}, {"<|im_start|>", RVL_CHAT_CHATML},
        {"<|eot_id|>", RVL_CHAT_LLAMA3}, {"<start_of_turn>", RVL_CHAT_GEMMA},
        {"<|end|>", RVL_CHAT_PHI3}, {"<|START_OF_TURN_TOKEN|>", RVL_CHAT_COMMAND_R},
        {"<|start_of_role|>", RVL_CHAT_GRANITE}, {"[INST]", RVL_CHAT_MISTRAL_V3_TEKKEN},
    };
    for (size_t i = 0; i < sizeof VOCAB / sizeof VOCAB[0]; i++)
        if (rvl_tok_find(tok, VOCAB[i].tok, strlen(VOCAB[i].tok)) != RVL_TOK_NULL) {
            /* Qwen3's vocabulary is Qwen2.5's plus <think> and </think> */
            (*out)->family = VOCAB[i].f == RVL_CHAT_CHATML && rvl_tok_find(tok, "</think>", 8) != RVL_TOK_NULL
                           ? RVL_CHAT_QWEN3 : VOCAB[i].f;
            snprintf((*out)->desc, sizeof (*out)->desc, "built-in %s", rvl_chat_family_name((*out)->family));
            if (warning) {
                free(*warning);
                *warning = warnf("the model has no chat template: using %s (from its vocabulary)",
                                 rvl_chat_family_name((*out)->family));
            }
            break;
        }
    return 0;
}

int rvl_chat_format(const rvl_chat *c, const rvl_chat_msg *msgs, size_t n, bool add_generation_prompt,
                    char **out, char **warning)
{
    *out = NULL;
    if (warning) *warning = NULL;
    const char *effort = c->effort[0] ? c->effort : NULL;
    if (c->tmpl) {
        /* the variables beyond transformers' usual ones: {"enable_thinking":
         * bool, "reasoning_effort": "word"} as set (the effort is [a-z]+) */
        char extra[96];
        snprintf(extra, sizeof extra, "{%s%s%s%s%s}",
                 c->think < 0 ? "" : c->think ? "\"enable_thinking\": true" : "\"enable_thinking\": false",
                 c->think >= 0 && effort ? ", " : "", effort ? "\"reasoning_effort\": \"" : "",
                 effort ? effort : "", effort ? "\"" : "");
        rvl_chat_render_opts o = {
            .msgs = msgs, .n_msgs = n, .add_generation_prompt = add_generation_prompt,
            .bos_token = c->bos, .eos_token = c->eos,
            .context_json = c->think < 0 && !effort ? NULL : extra,
        };
        int rc = rvl_chat_tmpl_render_ex(c->tmpl, &o, out, NULL);
        if (rc == 0) return 0;
        if (rc == RVL_ENOMEM) return rc;
        rvl_chat_family f = c->family ? c->family : RVL_CHAT_CHATML;
        if (warning) *warning = warnf("%s; using the built-in %s format", rvl_errmsg(), rvl_chat_family_name(f));
        return builtin_render(f, msgs, n, add_generation_prompt, c->bos, c->eos, c->think, effort, out);
    }
    return builtin_render(c->family, msgs, n, add_generation_prompt, c->bos, c->eos, c->think, effort, out);
}

void rvl_chat_set_thinking(rvl_chat *c, int enable) { c->think = enable < 0 ? -1 : enable > 0; }

int rvl_chat_set_reasoning_effort(rvl_chat *c, const char *effort)
{
    if (!effort) {
        c->effort[0] = 0;
        return 0;
    }
    size_t n = strlen(effort);
    if (n == 0 || n >= sizeof c->effort || strspn(effort, "abcdefghijklmnopqrstuvwxyz") != n)
        return rvl_seterr(RVL_EINVAL, "reasoning effort '%s': want a word such as low, medium or high",
                          effort);
    memcpy(c->effort, effort, n + 1);
    return 0;
}

bool rvl_chat_has_reasoning(const rvl_chat *c)
{
    return c->family == RVL_CHAT_QWEN3 || c->family == RVL_CHAT_DEEPSEEK_R1 ||
           c->family == RVL_CHAT_GPT_OSS || c->writes_think;
}

rvl_think_format rvl_chat_think_format(const rvl_chat *c)
{
    return c->family == RVL_CHAT_GPT_OSS ? RVL_THINK_HARMONY : RVL_THINK_TAGS;
}

rvl_chat_family rvl_chat_family_of(const rvl_chat *c) { return c->family; }
const char *const *rvl_chat_stops(const rvl_chat *c) { return rvl_chat_stop_strings(c->family); }
const char *rvl_chat_describe(const rvl_chat *c) { return c->desc; }

void rvl_chat_close(rvl_chat *c)
{
    if (!c) return;
    rvl_chat_tmpl_close(c->tmpl);
    free(c->bos);
    free(c->eos);
    free(c);
}

/* ======================================================================
 * Conversations from JSON
 * ====================================================================== */

/* byte offset of the first invalid UTF-8 sequence, or -1 */
static long utf8_invalid_at(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (p[i]) {
        unsigned c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return (long)i;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return (long)i;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return (long)i;
        i += k + 1;
    }
    return -1;
}

int rvl_chat_conv_parse(const char *json, size_t len, const char *name, rvl_chat_msg **msgs, size_t *n)
{
    *msgs = NULL;
    *n = 0;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!j) {
        size_t off = end && end >= json ? (size_t)(end - json) : 0;
        return rvl_seterr(RVL_EFORMAT, "%s: invalid JSON at byte %zu", name, off);
    }
    int rc = 0;
    if (!cJSON_IsArray(j)) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: not a JSON array of messages", name);
        goto done;
    }
    size_t count = 0, bytes = 0;
    for (const cJSON *m = j->child; m; m = m->next, count++) {
        if (!cJSON_IsObject(m)) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: message %zu: not an object", name, count);
            goto done;
        }
        static const char *const keys[] = {"role", "content"};
        for (int k = 0; k < 2; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, keys[k]);
            if (!v) {
                rc = rvl_seterr(RVL_EFORMAT, "%s: message %zu: missing \"%s\"", name, count, keys[k]);
                goto done;
            }
            if (!cJSON_IsString(v)) {
                rc = rvl_seterr(RVL_EFORMAT, "%s: message %zu: \"%s\" is not a string", name, count, keys[k]);
                goto done;
            }
            long bad = utf8_invalid_at(v->valuestring);
            if (bad >= 0) {
                rc = rvl_seterr(RVL_EFORMAT, "%s: message %zu: invalid UTF-8 in \"%s\" at byte %ld",
                                name, count, keys[k], bad);
                goto done;
            }
            bytes += strlen(v->valuestring) + 1;
        }
    }
    /* one block: the array, then the strings */
    rvl_chat_msg *out = malloc(count * sizeof *out + bytes + 1);
    if (!out) {
        rc = rvl_seterr(RVL_ENOMEM, "%s: out of memory", name);
        goto done;
    }
    char *s = (char *)(out + count);
    size_t i = 0;
    for (const cJSON *m = j->child; m; m = m->next, i++) {
        const char *r = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        const char *c = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
        size_t rl = strlen(r) + 1, cl = strlen(c) + 1;
        memcpy(s, r, rl);
        out[i].role = s;
        s += rl;
        memcpy(s, c, cl);
        out[i].content = s;
        s += cl;
    }
    *msgs = out;
    *n = count;
done:
    cJSON_Delete(j);
    return rc;
}

int rvl_chat_conv_load(const char *path, rvl_chat_msg **msgs, size_t *n)
{
    char *data;
    size_t len;
    *msgs = NULL;
    *n = 0;
    int rc = read_file(path, &data, &len);
    if (rc) return rc;
    rc = rvl_chat_conv_parse(data, len, path, msgs, n);
    free(data);
    return rc;
}
