/*
 * serve_api.c - the OpenAI API's requests and answers (see serve.h).
 *
 * Requests are checked as OpenAI checks them: a field of the wrong type or
 * out of its range is a 400 naming the field ("param"). Fields OpenAI
 * defines that change nothing here (user, logit_bias, ...) are ignored, as
 * are unknown ones (llama-server does the same); "n" other than 1 and
 * multiple prompts are refused rather than answered wrongly.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"

enum { MAX_STOPS = 16 };

void api_error_set(api_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

#define BAD(param, ...) \
    (api_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

/* An optional field: NULL when absent or null (OpenAI's "not given"). */
static const cJSON *field(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(const cJSON *o, const char *name, bool *out, api_error *e)
{
    const cJSON *v = field(o, name);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return BAD(name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A number in [lo, hi]; *given tells whether it was there. */
static int get_num(const cJSON *o, const char *name, double lo, double hi, double *out,
                   bool *given, api_error *e)
{
    const cJSON *v = field(o, name);
    if (given)
        *given = v != NULL;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(name, "'%s' must be between %g and %g, not %g", name, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *name, double lo, double hi, double *out,
                   bool *given, api_error *e)
{
    const cJSON *v = field(o, name);
    if (v && (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)))
        return BAD(name, "'%s' must be an integer", name);
    return get_num(o, name, lo, hi, out, given, e);
}

/* A message's content: a string, or an array of {"type": "text", "text"}
 * parts, joined into one string that replaces the array in the tree. */
static int message_content(cJSON *msg, size_t i, const char **out, api_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsNull(c)) {
        *out = "";
        return 0;
    }
    if (cJSON_IsString(c)) {
        *out = c->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(c))
        return BAD(param, "'%s' must be a string or an array of text parts", param);
    rvl_buf joined = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text)) {
            rvl_buf_free(&joined);
            return BAD(param, "'%s': only text parts ({\"type\": \"text\", \"text\": ...}) are "
                       "supported", param);
        }
        rvl_buf_adds(&joined, text->valuestring);
    }
    char *s = rvl_buf_take(&joined);
    cJSON *str = s ? cJSON_CreateString(s) : NULL;
    free(s);
    if (!str || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", str)) {
        cJSON_Delete(str);
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    *out = str->valuestring;
    return 0;
}

static int parse_messages(cJSON *root, api_request *r, api_error *e)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs)
        return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(msgs))
        return BAD("messages", "'messages' must be an array");
    const size_t n = (size_t)cJSON_GetArraySize(msgs);
    if (n == 0)
        return BAD("messages", "'messages' must not be empty");
    if (!(r->msgs = calloc(n, sizeof *r->msgs))) {
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    size_t i = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!cJSON_IsObject(m))
            return BAD(param, "'%s' must be an object", param);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!cJSON_IsString(role) || !role->valuestring[0])
            return BAD(param, "'%s' must be a non-empty string", param);
        r->msgs[i].role = role->valuestring;
        if (message_content(m, i, &r->msgs[i].content, e) < 0)
            return -1;
        i++;
    }
    r->n_msgs = n;
    return 0;
}

/* "prompt": a string, an array of one string, or an array of token ids. */
static int parse_prompt(const cJSON *root, api_request *r, api_error *e)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p || cJSON_IsNull(p))
        return BAD("prompt", "'prompt' is required");
    if (cJSON_IsString(p)) {
        r->prompt = p->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(p))
        return BAD("prompt", "'prompt' must be a string, an array of one string or an array "
                   "of token ids");
    const int n = cJSON_GetArraySize(p);
    if (n == 1 && cJSON_IsString(p->child)) {
        r->prompt = p->child->valuestring;
        return 0;
    }
    if (n > 0 && cJSON_IsString(p->child))
        return BAD("prompt", "one prompt per request: 'prompt' has %d", n);
    if (n == 0)
        return BAD("prompt", "'prompt' must not be empty");
    if (!(r->ids = malloc((size_t)n * sizeof *r->ids))) {
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble > INT32_MAX)
            return BAD("prompt", "'prompt' must be a string, an array of one string or an "
                       "array of token ids (non-negative integers)");
        r->ids[r->n_ids++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int parse_stop(const cJSON *root, api_request *r, api_error *e)
{
    const cJSON *s = field(root, "stop");
    if (!(r->stops = calloc(MAX_STOPS + 1, sizeof *r->stops))) {
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    if (!s)
        return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0])
            return BAD("stop", "'stop' must not be empty");
        r->stops[0] = s->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(s))
        return BAD("stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > MAX_STOPS)
        return BAD("stop", "'stop' has more than %d strings", MAX_STOPS);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, s) {
        if (!cJSON_IsString(x) || !x->valuestring[0])
            return BAD("stop", "'stop' must be a string or an array of non-empty strings");
        r->stops[i++] = x->valuestring;
    }
    return 0;
}

/* The sampling fields over the server's defaults. */
static int parse_sampling(const cJSON *root, uint64_t seed, api_request *r, api_error *e)
{
    rvl_sampler_params *sp = &r->sampling;
    double v;
    bool given;
    if (get_num(root, "temperature", 0, 2, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->temp = (float)v;
    if (get_num(root, "top_p", 0, 1, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->top_p = v > 0 ? (float)v : 1e-9f;   /* 0: the most likely token only */
    if (get_int(root, "top_k", 0, 1e9, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->top_k = (int32_t)v;
    if (get_num(root, "min_p", 0, 1, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->min_p = (float)v;
    if (get_num(root, "frequency_penalty", -2, 2, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->freq_penalty = (float)v;
    if (get_num(root, "presence_penalty", -2, 2, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->presence_penalty = (float)v;
    if (get_num(root, "repeat_penalty", 1e-6, 100, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->repeat_penalty = (float)v;
    sp->seed = seed;
    if (get_int(root, "seed", -9.2e18, 1.8e19, &v, &given, e) < 0)
        return -1;
    if (given)
        sp->seed = v < 0 ? (uint64_t)(int64_t)v : (uint64_t)v;
    return 0;
}

int api_parse(api_kind kind, const char *body, size_t n, const rvl_sampler_params *defaults,
              uint64_t seed, api_request *r, api_error *e)
{
    *r = (api_request){.kind = kind, .max_tokens = -1, .sampling = *defaults};
    cJSON *root = cJSON_ParseWithLength(body, n);
    r->tree = root;
    if (!root)
        return BAD(NULL, "the body is not valid JSON");
    if (!cJSON_IsObject(root))
        return BAD(NULL, "the body must be a JSON object");
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model))
        return BAD("model", "'model' must be a string");
    if (kind == API_CHAT ? parse_messages(root, r, e) < 0 : parse_prompt(root, r, e) < 0)
        return -1;
    if (get_bool(root, "stream", &r->stream, e) < 0 || get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0)
        return -1;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so))
            return BAD("stream_options", "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, e) < 0)
            return -1;
    }
    double v;
    bool given;
    /* max_completion_tokens is the newer name; either is taken */
    static const char *const max_names[] = {"max_completion_tokens", "max_tokens"};
    for (int i = 0; i < 2; i++) {
        if (get_int(root, max_names[i], 1, INT32_MAX, &v, &given, e) < 0)
            return -1;
        if (given) {
            r->max_tokens = (int32_t)v;
            break;
        }
    }
    if (get_int(root, "t_max_predict_ms", -1e15, 1e15, &v, &given, e) < 0)
        return -1;
    if (given && v > 0)
        r->t_max_predict_ms = (int64_t)v;
    if (get_int(root, "n", 1, 1e9, &v, &given, e) < 0)
        return -1;
    if (given && v != 1)
        return BAD("n", "only one choice per request ('n': 1) is supported");
    if (parse_sampling(root, seed, r, e) < 0 || parse_stop(root, r, e) < 0)
        return -1;
    return 0;
}

void api_request_free(api_request *r)
{
    free(r->msgs);
    free(r->ids);
    free(r->stops);
    cJSON_Delete(r->tree);
    *r = (api_request){0};
}

/* ====================================================================
 * Answers
 * ==================================================================== */

void api_write_error(FILE *f, const api_error *e)
{
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "error");
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "message");
    rvl_jw_str(&w, e->message);
    rvl_jw_key(&w, "type");
    rvl_jw_str(&w, e->type);
    rvl_jw_key(&w, "param");
    rvl_jw_str(&w, e->param[0] ? e->param : NULL);
    rvl_jw_key(&w, "code");
    rvl_jw_str(&w, e->code);
    rvl_jw_obj_end(&w);
    rvl_jw_obj_end(&w);
}

static void write_head(rvl_jw *w, const api_meta *m, const char *object)
{
    rvl_jw_key(w, "id");
    rvl_jw_str(w, m->id);
    rvl_jw_key(w, "object");
    rvl_jw_str(w, object);
    rvl_jw_key(w, "created");
    rvl_jw_i64(w, m->created);
    rvl_jw_key(w, "model");
    rvl_jw_str(w, m->model);
}

static void write_usage(rvl_jw *w, uint32_t n_prompt, uint32_t n_gen)
{
    rvl_jw_key(w, "usage");
    rvl_jw_obj(w);
    rvl_jw_key(w, "prompt_tokens");
    rvl_jw_u64(w, n_prompt);
    rvl_jw_key(w, "completion_tokens");
    rvl_jw_u64(w, n_gen);
    rvl_jw_key(w, "total_tokens");
    rvl_jw_u64(w, (uint64_t)n_prompt + n_gen);
    rvl_jw_obj_end(w);
}

void api_write_result(FILE *f, const api_meta *m, const char *text, size_t n,
                      const char *reasoning, size_t n_reasoning, const char *finish,
                      uint32_t n_prompt, uint32_t n_gen)
{
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    write_head(&w, m, m->kind == API_CHAT ? "chat.completion" : "text_completion");
    rvl_jw_key(&w, "choices");
    rvl_jw_arr(&w);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "index");
    rvl_jw_i64(&w, 0);
    if (m->kind == API_CHAT) {
        rvl_jw_key(&w, "message");
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "role");
        rvl_jw_str(&w, "assistant");
        rvl_jw_key(&w, "content");
        rvl_jw_strn(&w, text, n);
        if (reasoning) {
            rvl_jw_key(&w, "reasoning_content");
            rvl_jw_strn(&w, reasoning, n_reasoning);
        }
        rvl_jw_obj_end(&w);
    } else {
        rvl_jw_key(&w, "text");
        rvl_jw_strn(&w, text, n);
    }
    rvl_jw_key(&w, "logprobs");
    rvl_jw_null(&w);
    rvl_jw_key(&w, "finish_reason");
    rvl_jw_str(&w, finish);
    rvl_jw_obj_end(&w);
    rvl_jw_arr_end(&w);
    write_usage(&w, n_prompt, n_gen);
    rvl_jw_obj_end(&w);
}

void api_write_chunk(FILE *f, const api_meta *m, bool role_first, const char *text, size_t n,
                     bool reasoning, const char *finish)
{
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    write_head(&w, m, m->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    rvl_jw_key(&w, "choices");
    rvl_jw_arr(&w);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "index");
    rvl_jw_i64(&w, 0);
    if (m->kind == API_CHAT) {
        rvl_jw_key(&w, "delta");
        rvl_jw_obj(&w);
        if (role_first) {
            rvl_jw_key(&w, "role");
            rvl_jw_str(&w, "assistant");
        }
        if (text || role_first) {
            rvl_jw_key(&w, reasoning ? "reasoning_content" : "content");
            rvl_jw_strn(&w, text ? text : "", text ? n : 0);
        }
        rvl_jw_obj_end(&w);
    } else {
        rvl_jw_key(&w, "text");
        rvl_jw_strn(&w, text ? text : "", text ? n : 0);
    }
    rvl_jw_key(&w, "logprobs");
    rvl_jw_null(&w);
    rvl_jw_key(&w, "finish_reason");
    rvl_jw_str(&w, finish);
    rvl_jw_obj_end(&w);
    rvl_jw_arr_end(&w);
    rvl_jw_obj_end(&w);
}

void api_write_usage_chunk(FILE *f, const api_meta *m, uint32_t n_prompt, uint32_t n_gen)
{
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    write_head(&w, m, m->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    rvl_jw_key(&w, "choices");
    rvl_jw_arr(&w);
    rvl_jw_arr_end(&w);
    write_usage(&w, n_prompt, n_gen);
    rvl_jw_obj_end(&w);
}

void api_write_models(FILE *f, const char *model, int64_t created)
{
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "object");
    rvl_jw_str(&w, "list");
    rvl_jw_key(&w, "data");
    rvl_jw_arr(&w);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "id");
    rvl_jw_str(&w, model);
    rvl_jw_key(&w, "object");
    rvl_jw_str(&w, "model");
    rvl_jw_key(&w, "created");
    rvl_jw_i64(&w, created);
    rvl_jw_key(&w, "owned_by");
    rvl_jw_str(&w, "ruvllm");
    rvl_jw_obj_end(&w);
    rvl_jw_arr_end(&w);
    rvl_jw_obj_end(&w);
}
