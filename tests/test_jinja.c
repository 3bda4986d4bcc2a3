/*
 * test_jinja.c - the chat-template engine (lib/chat/jinja/) and the chat
 * formatting API (lib/chat/chat.c).
 *
 *  - Every real template in tests/data/templates/ x every conversation in
 *    conv/ renders byte for byte as Python's jinja2 does under
 *    transformers' settings (goldens from tests/ref/gen_template_goldens.py),
 *    and fails where jinja2 raises, with the same raise_exception message.
 *  - One small template per engine feature (features.json), also compared
 *    with jinja2's output or error.
 *  - Errors: syntax errors with line and column, unknown filters and tags,
 *    undefined values, raise_exception.
 *  - Hostile templates end in an error, quickly: loop budget, recursion,
 *    nesting, output and memory caps, exponential structures.
 *  - Family detection, built-in formatters (equal to the real templates on
 *    plain conversations), fallbacks, overrides, stop strings, JSON
 *    conversations.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_io.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ruvllm.h"

#define DATA "tests/data/templates/"
#define NOW 1721995200   /* 2024-07-26 12:00:00 UTC, as in the golden script */

/* ======================================================================
 * Helpers
 * ====================================================================== */

static cJSON *load_json(const char *path)
{
    char *s = test_slurp(path, NULL);
    if (!s) fail_msg("cannot read %s (run from the repository root)", path);
    cJSON *j = cJSON_Parse(s);
    free(s);
    if (!j) fail_msg("%s: bad JSON", path);
    return j;
}

/* Render `src` with a JSON context; returns the rc, *out owned. */
static int render_ctx(const char *src, const char *ctx_json, char **out, size_t *len, const rvl_chat_render_opts *lim)
{
    rvl_chat_tmpl *t = NULL;
    *out = NULL;
    int rc = rvl_chat_tmpl_open(&t, src, strlen(src), "t");
    if (rc) return rc;
    rvl_chat_render_opts o = {0};
    if (lim) o = *lim;
    o.context_json = ctx_json;
    o.use_now = true;
    o.now = NOW;
    rc = rvl_chat_tmpl_render_ex(t, &o, out, len);
    rvl_chat_tmpl_close(t);
    return rc;
}

/* Render expecting success; returns owned text. */
static char *render_ok(const char *src, const char *ctx)
{
    char *out;
    size_t len;
    int rc = render_ctx(src, ctx ? ctx : "{}", &out, &len, NULL);
    if (rc) fail_msg("render of %s failed: %s", src, rvl_errmsg());
    return out;
}

/* Render expecting failure; returns the rc; the message is rvl_errmsg(). */
static int render_err(const char *src, const char *ctx, const rvl_chat_render_opts *lim)
{
    char *out;
    size_t len;
    int rc = render_ctx(src, ctx ? ctx : "{}", &out, &len, lim);
    if (rc == 0) fail_msg("render of %.80s succeeded: %.200s", src, out);
    free(out);
    return rc;
}

static void assert_msg_contains(const char *needle)
{
    if (!strstr(rvl_errmsg(), needle))
        fail_msg("error message \"%s\" lacks \"%s\"", rvl_errmsg(), needle);
}

/* JSON context for a template of the manifest and a conversation file */
static char *conv_context(const cJSON *meta, const char *conv_path)
{
    cJSON *conv = load_json(conv_path);
    const cJSON *bos = cJSON_GetObjectItem(meta, "bos"), *eos = cJSON_GetObjectItem(meta, "eos");
    if (cJSON_IsString(bos)) cJSON_AddStringToObject(conv, "bos_token", bos->valuestring);
    if (cJSON_IsString(eos)) cJSON_AddStringToObject(conv, "eos_token", eos->valuestring);
    /* the manifest's extra variables (Qwen3's enable_thinking) */
    const cJSON *extra = cJSON_GetObjectItem(meta, "context");
    for (const cJSON *e = extra ? extra->child : NULL; e; e = e->next)
        cJSON_AddItemToObject(conv, e->string, cJSON_Duplicate(e, true));
    char *s = cJSON_PrintUnformatted(conv);
    cJSON_Delete(conv);
    return s;
}

/* the template file of a manifest entry: "file", else its name */
static const char *tmpl_file(const cJSON *meta)
{
    const cJSON *f = cJSON_GetObjectItem(meta, "file");
    return cJSON_IsString(f) ? f->valuestring : meta->string;
}

static const char *const CONVS[] = {
    "developer", "no_system", "non_alternating", "reasoning", "reasoning_last", "single_user",
    "system_multi", "system_multi_nogen", "think", "tools",
};
#define N_CONVS (sizeof CONVS / sizeof CONVS[0])

/* ======================================================================
 * Real templates against jinja2
 * ====================================================================== */

static void test_jinja_real_templates_match_jinja2_goldens(void **state)
{
    (void)state;
    cJSON *man = load_json(DATA "templates.json");
    int n_txt = 0, n_err = 0, n_templates = 0;
    for (const cJSON *m = man->child; m; m = m->next, n_templates++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s.jinja", tmpl_file(m));
        size_t slen;
        char *src = test_slurp(path, &slen);
        assert_non_null(src);
        rvl_chat_tmpl *t;
        if (rvl_chat_tmpl_open(&t, src, slen, m->string)) fail_msg("%s: %s", m->string, rvl_errmsg());
        for (size_t c = 0; c < N_CONVS; c++) {
            snprintf(path, sizeof path, DATA "conv/%s.json", CONVS[c]);
            char *ctx = conv_context(m, path);
            rvl_chat_render_opts o = {.context_json = ctx, .use_now = true, .now = NOW};
            char *out = NULL;
            size_t len = 0;
            int rc = rvl_chat_tmpl_render_ex(t, &o, &out, &len);
            snprintf(path, sizeof path, DATA "golden/%s.%s.txt", m->string, CONVS[c]);
            size_t glen;
            char *gold = test_slurp(path, &glen);
            if (gold) {
                if (rc) fail_msg("%s x %s: %s", m->string, CONVS[c], rvl_errmsg());
                if (len != glen || memcmp(out, gold, len))
                    fail_msg("%s x %s differs from jinja2:\n--- jinja2\n%s\n--- ours\n%s", m->string, CONVS[c], gold, out);
                n_txt++;
            } else {
                snprintf(path, sizeof path, DATA "golden/%s.%s.err", m->string, CONVS[c]);
                gold = test_slurp(path, NULL);
                if (!gold) fail_msg("no golden for %s x %s", m->string, CONVS[c]);
                if (rc == 0) fail_msg("%s x %s rendered but jinja2 raises %s", m->string, CONVS[c], gold);
                /* TemplateError: raise_exception's message comes through */
                if (!strncmp(gold, "TemplateError: ", 15) && !strstr(rvl_errmsg(), gold + 15))
                    fail_msg("%s x %s: message \"%s\", jinja2 \"%s\"", m->string, CONVS[c], rvl_errmsg(), gold);
                n_err++;
            }
            free(gold);
            free(out);
            cJSON_free(ctx);
        }
        rvl_chat_tmpl_close(t);
        free(src);
    }
    cJSON_Delete(man);
    print_message("%d templates: %d renders equal, %d errors where jinja2 raises\n", n_templates, n_txt, n_err);
    assert_true(n_templates >= 20);
    assert_int_equal(n_txt + n_err, n_templates * (int)N_CONVS);
    assert_true(n_err >= 5);
}

static void test_jinja_features_match_jinja2(void **state)
{
    (void)state;
    cJSON *feat = load_json(DATA "features.json");
    cJSON *gold = load_json(DATA "golden/features.json");
    char *ctx = cJSON_PrintUnformatted(cJSON_GetObjectItem(feat, "context"));
    const cJSON *cases = cJSON_GetObjectItem(feat, "cases");
    int n = 0, bad = 0;
    const cJSON *g = gold->child;
    for (const cJSON *c = cases->child; c; c = c->next, g = g->next, n++) {
        assert_non_null(g);
        char *out = NULL;
        size_t len = 0;
        int rc = render_ctx(c->valuestring, ctx, &out, &len, NULL);
        const cJSON *want = cJSON_GetObjectItem(g, "out");
        if (want) {
            if (rc || len != strlen(want->valuestring) || memcmp(out, want->valuestring, len)) {
                print_error("feature %d: %s\n  jinja2: %s\n  ours:   %s\n", n, c->valuestring, want->valuestring,
                            rc ? rvl_errmsg() : out);
                bad++;
            }
        } else if (rc == 0) {
            print_error("feature %d: %s\n  jinja2 raises %s\n  ours:   %s\n", n, c->valuestring,
                        cJSON_GetObjectItem(g, "err")->valuestring, out);
            bad++;
        }
        free(out);
    }
    cJSON_free(ctx);
    cJSON_Delete(feat);
    cJSON_Delete(gold);
    print_message("%d feature templates compared with jinja2\n", n);
    assert_true(n > 100);
    assert_int_equal(bad, 0);
}

/* ======================================================================
 * Errors
 * ====================================================================== */

static void test_jinja_syntax_error_names_line_and_column(void **state)
{
    (void)state;
    rvl_chat_tmpl *t = NULL;
    const char *src = "line one\n{% if x %}\n   {{ x + }}\n{% endif %}";
    assert_int_equal(rvl_chat_tmpl_open(&t, src, strlen(src), "tmpl.jinja"), RVL_EFORMAT);
    assert_null(t);
    assert_msg_contains("tmpl.jinja:3:11:");
}

static void test_jinja_unknown_filter_is_a_parse_error(void **state)
{
    (void)state;
    rvl_chat_tmpl *t = NULL;
    const char *src = "{% if false %}{{ x | frobnicate }}{% endif %}";
    assert_int_equal(rvl_chat_tmpl_open(&t, src, strlen(src), "f"), RVL_EFORMAT);
    assert_msg_contains("no filter named 'frobnicate'");
    assert_msg_contains("f:1:22:");
    src = "{{ x is frob }}";
    assert_int_equal(rvl_chat_tmpl_open(&t, src, strlen(src), "f"), RVL_EFORMAT);
    assert_msg_contains("no test named 'frob'");
}

static void test_jinja_unknown_or_unclosed_tags_are_errors(void **state)
{
    (void)state;
    rvl_chat_tmpl *t = NULL;
    static const char *const bad[][2] = {
        {"{% frob %}", "unknown tag 'frob'"},
        {"{% for m in messages %}x", "expected 'else' or 'endfor'"},
        {"{% if x %}{% endfor %}", "unexpected 'endfor'"},
        {"{{ 'abc }}", "unterminated string"},
        {"{# no end", "missing end of comment"},
        {"{{ x", "unexpected end of template"},
        {"{% include 'x' %}", "'include' tag is not supported"},
        {"{{ a b }}", "expected end of print statement"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (rvl_chat_tmpl_open(&t, bad[i][0], strlen(bad[i][0]), "t") != RVL_EFORMAT)
            fail_msg("%s parsed", bad[i][0]);
        assert_msg_contains(bad[i][1]);
    }
}

static void test_jinja_raise_exception_reports_message_and_line(void **state)
{
    (void)state;
    assert_int_equal(render_err("ok\n{% if true %}{{ raise_exception('Roles must alternate!') }}{% endif %}", NULL, NULL),
                     RVL_EFORMAT);
    assert_msg_contains("t:2: raise_exception: Roles must alternate!");
}

static void test_jinja_undefined_values_behave_like_jinja2(void **state)
{
    (void)state;
    /* printing, testing and iterating undefined values is fine ... */
    char *s = render_ok("[{{ nope }}|{{ nope is defined }}|{% for x in nope %}x{% endfor %}|{{ nope|length }}"
                        "|{{ {'a': 1}.b is defined }}|{{ nope|default('d') }}]", NULL);
    assert_string_equal(s, "[|False||0|False|d]");
    free(s);
    /* ... attributes of undefined values and arithmetic on them are not */
    render_err("{{ nope.attr }}", NULL, NULL);
    assert_msg_contains("'nope' is undefined");
    render_err("{{ d.zz.yy }}", "{\"d\": {}}", NULL);
    assert_msg_contains("'dict object' has no attribute 'zz'");
    render_err("{{ nope + 1 }}", NULL, NULL);
    assert_msg_contains("'nope' is undefined");
    render_err("{{ nope() }}", NULL, NULL);
    render_err("{{ [1].append(2) }}", NULL, NULL);
    assert_msg_contains("unsafe");
}

static void test_jinja_newlines_are_normalized_like_jinja2(void **state)
{
    (void)state;
    /* \r\n and \r become \n, also inside string literals; one trailing newline goes */
    char *s = render_ok("{% if true %}\r\nx\r\n  {% endif %}\r\ny\r\n", NULL);
    assert_string_equal(s, "x\ny");
    free(s);
    s = render_ok("a\rb {{ \"c\r\nd\" }}", NULL);
    assert_string_equal(s, "a\nb c\nd");
    free(s);
}

/* ======================================================================
 * Hostile templates
 * ====================================================================== */

/* Found by fuzz_jinja: code point offsets of invalid UTF-8 overran. */
static void test_jinja_invalid_utf8_strings_are_safe(void **state)
{
    (void)state;
    char *s = render_ok("{{ '\xb3\xf8" "a\xe2\x82'[::-1]|length }}{{ '\xb3\xf8" "a'[1:] }}{{ '\xb3x'|list|length }}", NULL);
    assert_string_equal(s, "5\xf8" "a2");
    free(s);
}

/* The budget counts steps, not seconds: every loop iteration costs one
 * unit, so a render that runs N iterations needs a budget above N. Here
 * 100 + 100 * 100 iterations (and range() costs one unit per 8 items). */
static void test_jinja_budget_counts_every_loop_iteration(void **state)
{
    (void)state;
    const char *t = "{% for a in range(100) %}{% for b in range(100) %}{% endfor %}{% endfor %}x";
    rvl_chat_render_opts lim = {.limit_ops = 100 + 100 * 100};
    assert_int_equal(render_err(t, NULL, &lim), RVL_ERANGE);
    assert_msg_contains("budget");
    char *out;
    size_t len;
    lim.limit_ops = 2 * (100 + 100 * 100);
    assert_int_equal(render_ctx(t, "{}", &out, &len, &lim), 0);
    assert_string_equal(out, "x");
    free(out);
}

/* A loop nest of 25 million iterations stops at the budget's millionth
 * step. (Bounded even if the budget broke: 5000 x 5000 empty iterations
 * end; the test above is what catches an uncounted loop.) */
static void test_jinja_nested_loops_hit_the_iteration_budget(void **state)
{
    (void)state;
    rvl_chat_render_opts lim = {.limit_ops = 1000000};
    assert_int_equal(render_err("{% for a in range(5000) %}{% for b in range(5000) %}{% endfor %}{% endfor %}",
                                NULL, &lim), RVL_ERANGE);
    assert_msg_contains("budget");
}

static void test_jinja_recursive_macro_hits_the_depth_limit(void **state)
{
    (void)state;
    assert_int_equal(render_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, NULL), RVL_ERANGE);
    assert_msg_contains("nested too deeply");
    /* two macros calling each other */
    render_err("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}", NULL, NULL);
    assert_msg_contains("nested too deeply");
}

static void test_jinja_deep_nesting_is_a_parse_error(void **state)
{
    (void)state;
    size_t n = 20000;
    char *src = malloc(3 * n + 16);
    assert_non_null(src);
    char *p = src;
    p += sprintf(p, "{{ ");
    for (size_t i = 0; i < n; i++) *p++ = '(';
    *p++ = '1';
    for (size_t i = 0; i < n; i++) *p++ = ')';
    strcpy(p, " }}");
    rvl_chat_tmpl *t = NULL;
    assert_int_equal(rvl_chat_tmpl_open(&t, src, strlen(src), "deep"), RVL_EFORMAT);
    assert_msg_contains("nested too deeply");
    /* nested statements */
    p = src;
    for (size_t i = 0; i < 5000; i++) p += sprintf(p, "{%% if 1 %%}");
    *p = 0;
    assert_int_equal(rvl_chat_tmpl_open(&t, src, strlen(src), "deep"), RVL_EFORMAT);
    free(src);
}

static void test_jinja_long_filter_chain_ends_in_an_error(void **state)
{
    (void)state;
    size_t n = 50000;
    char *src = malloc(n * 8 + 16);
    assert_non_null(src);
    char *p = src + sprintf(src, "{{ 'x'");
    for (size_t i = 0; i < n; i++) p += sprintf(p, "|string");
    strcpy(p, " }}");
    rvl_chat_tmpl *t = NULL;
    int rc = rvl_chat_tmpl_open(&t, src, strlen(src), "chain");
    if (rc == 0) {
        char *out;
        rc = rvl_chat_tmpl_render(t, NULL, 0, false, NULL, NULL, &out);
        rvl_chat_tmpl_close(t);
    }
    assert_true(rc < 0);
    free(src);
}

static void test_jinja_output_and_memory_caps(void **state)
{
    (void)state;
    rvl_chat_render_opts lim = {.limit_output = 1 << 20};
    assert_int_equal(render_err("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", NULL, &lim), RVL_ERANGE);
    assert_msg_contains("output longer");
    /* a string doubling itself */
    rvl_chat_render_opts mem = {.limit_memory = 64 << 20};
    assert_int_equal(render_err("{% set ns = namespace(s='x') %}{% for i in range(200) %}{% set ns.s = ns.s ~ ns.s %}"
                                "{% endfor %}", NULL, &mem), RVL_ERANGE);
    /* 'x' * 10**12 */
    assert_int_equal(render_err("{{ 'x' * 1000000000000 }}", NULL, NULL), RVL_ERANGE);
}

static void test_jinja_exponential_structures_are_bounded(void **state)
{
    (void)state;
    /* a list holding itself twice per level: 2^60 leaves */
    const char *build = "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                        "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}";
    static const char *const uses[] = {"{{ ns.a|tojson }}", "{{ ns.a == ns.b }}", "{{ ns.a|string|length }}",
                                       "{{ [ns.a, ns.b]|unique|list|length }}", "{{ ns.a in [ns.b] }}"};
    for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, "%s%s", build, uses[i]);
        render_err(src, NULL, NULL);
    }
}

static void test_jinja_sandbox_range_limit(void **state)
{
    (void)state;
    render_err("{{ range(100001)|length }}", NULL, NULL);
    assert_msg_contains("MAX_RANGE");
    char *s = render_ok("{{ range(100000)|length }}", NULL);
    assert_string_equal(s, "100000");
    free(s);
}

/* ======================================================================
 * The API
 * ====================================================================== */

static const rvl_chat_msg CONV[] = {
    {"system", "Be brief."}, {"user", "Hi \xf0\x9f\x8c\x8d"}, {"assistant", "Hello!"}, {"user", "Bye"},
};

static void test_chat_tmpl_render_takes_messages_and_tokens(void **state)
{
    (void)state;
    const char *src = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m['content'] }}{% endfor %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token is defined }}";
    rvl_chat_tmpl *t;
    assert_int_equal(rvl_chat_tmpl_open(&t, src, strlen(src), "t"), 0);
    char *out;
    assert_int_equal(rvl_chat_tmpl_render(t, CONV, 4, true, "<s>", NULL, &out), 0);
    assert_string_equal(out, "<s><system>Be brief.<user>Hi \xf0\x9f\x8c\x8d<assistant>Hello!<user>Bye<assistant>False");
    free(out);
    rvl_chat_tmpl_close(t);
    rvl_chat_tmpl_close(NULL);
}

static void test_chat_detect_finds_each_template_family(void **state)
{
    (void)state;
    cJSON *man = load_json(DATA "templates.json");
    for (const cJSON *m = man->child; m; m = m->next) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s.jinja", tmpl_file(m));
        char *src = test_slurp(path, NULL);
        const char *want = cJSON_GetObjectItem(m, "family")->valuestring;
        rvl_chat_family f = rvl_chat_detect(src);
        if (strcmp(rvl_chat_family_name(f), want))
            fail_msg("%s: detected %s, want %s", m->string, rvl_chat_family_name(f), want);
        assert_int_equal(rvl_chat_family_from_name(want), f);
        free(src);
    }
    cJSON_Delete(man);
    assert_int_equal(rvl_chat_detect("plain text"), RVL_CHAT_UNKNOWN);
    assert_int_equal(rvl_chat_family_from_name("nope"), RVL_CHAT_UNKNOWN);
}

/* The golden's "Current date: 2024-07-26" (strftime_now pinned) becomes
 * today's local date, which the built-in gpt-oss format writes. */
static void put_today(char *gold)
{
    char today[16];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(today, sizeof today, "%Y-%m-%d", &tm);
    char *d = strstr(gold, "Current date: 2024-07-26");
    assert_non_null(d);
    assert_int_equal(strlen(today), 10);
    memcpy(d + 14, today, 10);
}

/* The built-in formatter of each family gives what the real template gives
 * for plain conversations; templates.json lists the conversations where a
 * template adds something of its own (a default system prompt, a date). */
static void test_chat_builtin_matches_real_templates(void **state)
{
    (void)state;
    cJSON *man = load_json(DATA "templates.json");
    int n = 0, bad = 0;
    for (const cJSON *m = man->child; m; m = m->next) {
        rvl_chat_family f = rvl_chat_family_from_name(cJSON_GetObjectItem(m, "family")->valuestring);
        const cJSON *skip = cJSON_GetObjectItem(m, "builtin_differs");
        for (size_t c = 0; c < N_CONVS; c++) {
            /* the built-ins write system, user and assistant turns; a
             * developer role and tools are the templates' own */
            bool skipped = !strcmp(CONVS[c], "developer") || !strcmp(CONVS[c], "tools");
            if (f == RVL_CHAT_GPT_OSS)   /* harmony has a developer role */
                skipped = !strcmp(CONVS[c], "tools");
            for (const cJSON *s = skip ? skip->child : NULL; s; s = s->next)
                if (!strcmp(s->valuestring, CONVS[c]) || !strcmp(s->valuestring, "*")) skipped = true;
            char path[512];
            snprintf(path, sizeof path, DATA "golden/%s.%s.txt", m->string, CONVS[c]);
            char *gold = test_slurp(path, NULL);
            if (!gold || skipped) {
                free(gold);
                continue;
            }
            snprintf(path, sizeof path, DATA "conv/%s.json", CONVS[c]);
            rvl_chat_msg *msgs;
            size_t nm;
            cJSON *conv = load_json(path);
            char *arr = cJSON_PrintUnformatted(cJSON_GetObjectItem(conv, "messages"));
            assert_int_equal(rvl_chat_conv_parse(arr, strlen(arr), path, &msgs, &nm), 0);
            const cJSON *bos = cJSON_GetObjectItem(m, "bos"), *eos = cJSON_GetObjectItem(m, "eos");
            const cJSON *think = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "context"), "enable_thinking");
            const cJSON *effort = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "context"), "reasoning_effort");
            bool agp = cJSON_IsTrue(cJSON_GetObjectItem(conv, "add_generation_prompt"));
            char *out;
            if (f == RVL_CHAT_GPT_OSS)
                put_today(gold);
            if (think || effort) {
                /* through rvl_chat, which passes enable_thinking and reasoning_effort on */
                rvl_chat *rc;
                assert_int_equal(rvl_chat_open(&rc, NULL, 0, rvl_chat_family_name(f),
                                               cJSON_IsString(bos) ? bos->valuestring : NULL,
                                               cJSON_IsString(eos) ? eos->valuestring : NULL, NULL), 0);
                if (think)
                    rvl_chat_set_thinking(rc, cJSON_IsTrue(think));
                if (effort)
                    assert_int_equal(rvl_chat_set_reasoning_effort(rc, effort->valuestring), 0);
                assert_int_equal(rvl_chat_format(rc, msgs, nm, agp, &out, NULL), 0);
                rvl_chat_close(rc);
            } else {
                assert_int_equal(rvl_chat_builtin_render(f, msgs, nm, agp,
                                                         cJSON_IsString(bos) ? bos->valuestring : NULL,
                                                         cJSON_IsString(eos) ? eos->valuestring : NULL, &out), 0);
            }
            if (strcmp(out, gold)) {
                print_error("built-in %s vs %s x %s:\n--- template\n%s\n--- built-in\n%s\n", rvl_chat_family_name(f),
                            m->string, CONVS[c], gold, out);
                bad++;
            }
            n++;
            free(out);
            free(msgs);
            cJSON_free(arr);
            cJSON_Delete(conv);
            free(gold);
        }
    }
    cJSON_Delete(man);
    print_message("%d built-in renders compared with the real templates\n", n);
    assert_int_equal(bad, 0);
    assert_true(n >= 80);
}

static void test_chat_stop_strings_per_family(void **state)
{
    (void)state;
    assert_string_equal(rvl_chat_stop_strings(RVL_CHAT_CHATML)[0], "<|im_end|>");
    assert_string_equal(rvl_chat_stop_strings(RVL_CHAT_LLAMA3)[0], "<|eot_id|>");
    assert_string_equal(rvl_chat_stop_strings(RVL_CHAT_GEMMA)[0], "<end_of_turn>");
    assert_string_equal(rvl_chat_stop_strings(RVL_CHAT_PHI3)[0], "<|end|>");
    assert_string_equal(rvl_chat_stop_strings(RVL_CHAT_MISTRAL_V7)[0], "</s>");
    assert_null(rvl_chat_stop_strings(RVL_CHAT_UNKNOWN)[0]);
    for (int f = 1; f < RVL_CHAT_FAMILY_COUNT; f++) {
        assert_non_null(rvl_chat_stop_strings((rvl_chat_family)f)[0]);
        char *out;
        assert_int_equal(rvl_chat_builtin_render((rvl_chat_family)f, CONV, 4, true, "<s>", "</s>", &out), 0);
        assert_true(strstr(out, "Bye") != NULL);
        free(out);
    }
}

static void test_chat_open_uses_model_template_and_falls_back(void **state)
{
    (void)state;
    rvl_chat *c;
    char *warn, *out;
    /* a good template */
    const char *good = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    assert_int_equal(rvl_chat_open(&c, good, strlen(good), NULL, "<s>", "</s>", &warn), 0);
    assert_null(warn);
    assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_CHATML);
    assert_string_equal(rvl_chat_stops(c)[0], "<|im_end|>");
    assert_int_equal(rvl_chat_format(c, CONV + 1, 1, false, &out, &warn), 0);
    assert_null(warn);
    assert_string_equal(out, "<|im_start|>user\nHi \xf0\x9f\x8c\x8d<|im_end|>\n");
    free(out);
    rvl_chat_close(c);
    /* a template that does not parse: built-in of its family, with a warning */
    const char *broken = "{% for m in messages %}<|start_header_id|>{{ m.role | nosuchfilter }}<|end_header_id|>{% endfor %}";
    assert_int_equal(rvl_chat_open(&c, broken, strlen(broken), NULL, "<|begin_of_text|>", "<|eot_id|>", &warn), 0);
    assert_non_null(warn);
    assert_true(strstr(warn, "nosuchfilter") && strstr(warn, "llama3"));
    free(warn);
    assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_LLAMA3);
    assert_int_equal(rvl_chat_format(c, CONV + 1, 1, true, &out, &warn), 0);
    assert_string_equal(out, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi \xf0\x9f\x8c\x8d<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(out);
    rvl_chat_close(c);
    /* a template that fails at render time: built-in, with a warning */
    const char *raises = "{{ raise_exception('no system!') }}<start_of_turn>";
    assert_int_equal(rvl_chat_open(&c, raises, strlen(raises), NULL, "<bos>", "<eos>", &warn), 0);
    assert_null(warn);
    assert_int_equal(rvl_chat_format(c, CONV, 2, true, &out, &warn), 0);
    assert_non_null(warn);
    assert_true(strstr(warn, "no system!") != NULL);
    assert_string_equal(out, "<bos><start_of_turn>user\nBe brief.\n\nHi \xf0\x9f\x8c\x8d<end_of_turn>\n<start_of_turn>model\n");
    free(warn);
    free(out);
    rvl_chat_close(c);
    /* no template at all: chatml, with a warning */
    assert_int_equal(rvl_chat_open(&c, NULL, 0, NULL, NULL, NULL, &warn), 0);
    assert_non_null(warn);
    free(warn);
    assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_CHATML);
    rvl_chat_close(c);
    rvl_chat_close(NULL);
}

static void test_chat_override_by_name_or_file(void **state)
{
    (void)state;
    rvl_chat *c;
    char *warn, *out;
    const char *model = "{% for m in messages %}{{ m.content }}{% endfor %}";
    assert_int_equal(rvl_chat_open(&c, model, strlen(model), "zephyr", "<s>", "</s>", &warn), 0);
    assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_ZEPHYR);
    assert_int_equal(rvl_chat_format(c, CONV + 1, 1, true, &out, &warn), 0);
    assert_string_equal(out, "<|user|>\nHi \xf0\x9f\x8c\x8d</s>\n<|assistant|>\n");
    free(out);
    rvl_chat_close(c);
    /* a file */
    assert_int_equal(rvl_chat_open(&c, model, strlen(model), DATA "phi4.jinja", NULL, NULL, &warn), 0);
    assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_PHI4);
    assert_int_equal(rvl_chat_format(c, CONV + 1, 1, true, &out, &warn), 0);
    assert_string_equal(out, "<|im_start|>user<|im_sep|>Hi \xf0\x9f\x8c\x8d<|im_end|><|im_start|>assistant<|im_sep|>");
    free(out);
    rvl_chat_close(c);
    /* neither */
    assert_int_equal(rvl_chat_open(&c, model, strlen(model), "no-such-format-or-file", NULL, NULL, &warn), RVL_ENOTFOUND);
    assert_msg_contains("no-such-format-or-file");
}

static void test_chat_open_model_reads_the_gguf_template(void **state)
{
    (void)state;
    char path[4096];
    if (rvl_model_path(NULL, path, sizeof path)) {
        print_message("skipped: %s\n", rvl_errmsg());
        skip();
    }
    rvl_file *f;
    assert_int_equal(rvl_file_open(&f, path), 0);
    rvl_tokenizer *tok;
    assert_int_equal(rvl_tok_open(&tok, f), 0);
    rvl_chat *c;
    char *warn, *out;
    assert_int_equal(rvl_chat_open_model(&c, f, tok, NULL, &warn), 0);
    assert_null(warn);
    rvl_tok_close(tok);
    rvl_file_close(f);
    assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_CHATML);
    assert_string_equal(rvl_chat_describe(c), "model template (chatml)");
    assert_int_equal(rvl_chat_format(c, CONV + 1, 1, true, &out, &warn), 0);
    /* SmolLM2's template adds its own system prompt */
    assert_string_equal(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                             "<|im_start|>user\nHi \xf0\x9f\x8c\x8d<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    rvl_chat_close(c);
}

/* The smallest render budget with which the template renders n messages:
 * its work in steps (loop iterations and element visits), not seconds. */
static uint64_t ops_needed(const rvl_chat_tmpl *t, const rvl_chat_msg *msgs, size_t n)
{
    uint64_t lo = 0, hi = 1u << 24;   /* lo fails, hi renders */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        rvl_chat_render_opts o = {.msgs = msgs, .n_msgs = n, .add_generation_prompt = true,
                                  .bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>",
                                  .limit_ops = mid};
        char *out = NULL;
        int rc = rvl_chat_tmpl_render_ex(t, &o, &out, NULL);
        free(out);
        if (rc == 0)
            hi = mid;
        else {
            assert_int_equal(rc, RVL_ERANGE);
            lo = mid;
        }
    }
    return hi;
}

/* Messages through the Llama 3.1 template: a bounded number of steps per
 * message, so twice the messages cost twice the work. */
static void test_chat_render_work_grows_linearly_with_messages(void **state)
{
    (void)state;
    size_t len;
    char *src = test_slurp(DATA "llama3.1.jinja", &len);
    rvl_chat_tmpl *t;
    assert_int_equal(rvl_chat_tmpl_open(&t, src, len, "llama3.1"), 0);
    rvl_chat_msg msgs[100];
    msgs[0] = (rvl_chat_msg){"system", "You are a helpful assistant."};
    for (int i = 1; i < 100; i++)
        msgs[i] = (rvl_chat_msg){i % 2 ? "user" : "assistant",
                                 "A message of ordinary length, with some words in it, Gr\xc3\xbc\xc3\x9f" "e."};
    const uint64_t n50 = ops_needed(t, msgs, 50), n100 = ops_needed(t, msgs, 100);
    print_message("render budget needed: 50 messages %llu, 100 messages %llu\n",
                  (unsigned long long)n50, (unsigned long long)n100);
    assert_true(n50 <= 50 * 20);   /* ~8 per message today */
    assert_true(n100 <= 2 * n50 + 40);
    rvl_chat_tmpl_close(t);
    free(src);
}

/* ======================================================================
 * Conversations from JSON
 * ====================================================================== */

static int conv_from(const char *json, rvl_chat_msg **m, size_t *n)
{
    return rvl_chat_conv_parse(json, strlen(json), "conv.json", m, n);
}

static void test_chat_conv_parse_reads_role_and_content(void **state)
{
    (void)state;
    rvl_chat_msg *m;
    size_t n;
    assert_int_equal(conv_from("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Gr\\u00fc\\u00dfe \xf0\x9f\x8c\x8d\",\"x\":1}]", &m, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].role, "system");
    assert_string_equal(m[1].content, "Gr\xc3\xbc\xc3\x9f" "e \xf0\x9f\x8c\x8d");
    free(m);
    assert_int_equal(conv_from("[]", &m, &n), 0);
    assert_int_equal(n, 0);
    free(m);
}

static void test_chat_conv_parse_rejects_bad_conversations(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"{\"role\":\"user\"}", "not a JSON array"},
        {"[{\"content\":\"x\"}]", "message 0: missing \"role\""},
        {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]", "message 1: missing \"content\""},
        {"[{\"role\":\"user\",\"content\":3}]", "message 0: \"content\" is not a string"},
        {"[{\"role\":\"user\",\"content\":null}]", "\"content\" is not a string"},
        {"[\"hello\"]", "message 0: not an object"},
        {"[{\"role\":\"user\",\"content\":\"ab\xc3\x28\"}]", "invalid UTF-8 in \"content\" at byte 2"},
        {"[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]", "invalid UTF-8"},
        {"[{\"role\":\"user\",", "invalid JSON at byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rvl_chat_msg *m = (rvl_chat_msg *)1;
        size_t n = 1;
        if (conv_from(bad[i][0], &m, &n) != RVL_EFORMAT) fail_msg("accepted %s", bad[i][0]);
        assert_null(m);
        assert_int_equal(n, 0);
        assert_msg_contains("conv.json: ");
        assert_msg_contains(bad[i][1]);
    }
}

static void test_chat_conv_load_reads_a_file(void **state)
{
    (void)state;
    char path[] = "/tmp/rvl_conv_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *j = "[{\"role\": \"user\", \"content\": \"hello\"}]";
    assert_int_equal(write(fd, j, strlen(j)), (ssize_t)strlen(j));
    close(fd);
    rvl_chat_msg *m;
    size_t n;
    assert_int_equal(rvl_chat_conv_load(path, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].content, "hello");
    free(m);
    unlink(path);
    assert_int_equal(rvl_chat_conv_load(path, &m, &n), RVL_ENOTFOUND);
    assert_msg_contains(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jinja_real_templates_match_jinja2_goldens),
        cmocka_unit_test(test_jinja_features_match_jinja2),
        cmocka_unit_test(test_jinja_syntax_error_names_line_and_column),
        cmocka_unit_test(test_jinja_unknown_filter_is_a_parse_error),
        cmocka_unit_test(test_jinja_unknown_or_unclosed_tags_are_errors),
        cmocka_unit_test(test_jinja_raise_exception_reports_message_and_line),
        cmocka_unit_test(test_jinja_undefined_values_behave_like_jinja2),
        cmocka_unit_test(test_jinja_newlines_are_normalized_like_jinja2),
        cmocka_unit_test(test_jinja_invalid_utf8_strings_are_safe),
        cmocka_unit_test(test_jinja_budget_counts_every_loop_iteration),
        cmocka_unit_test(test_jinja_nested_loops_hit_the_iteration_budget),
        cmocka_unit_test(test_jinja_recursive_macro_hits_the_depth_limit),
        cmocka_unit_test(test_jinja_deep_nesting_is_a_parse_error),
        cmocka_unit_test(test_jinja_long_filter_chain_ends_in_an_error),
        cmocka_unit_test(test_jinja_output_and_memory_caps),
        cmocka_unit_test(test_jinja_exponential_structures_are_bounded),
        cmocka_unit_test(test_jinja_sandbox_range_limit),
        cmocka_unit_test(test_chat_tmpl_render_takes_messages_and_tokens),
        cmocka_unit_test(test_chat_detect_finds_each_template_family),
        cmocka_unit_test(test_chat_builtin_matches_real_templates),
        cmocka_unit_test(test_chat_stop_strings_per_family),
        cmocka_unit_test(test_chat_open_uses_model_template_and_falls_back),
        cmocka_unit_test(test_chat_override_by_name_or_file),
        cmocka_unit_test(test_chat_open_model_reads_the_gguf_template),
        cmocka_unit_test(test_chat_render_work_grows_linearly_with_messages),
        cmocka_unit_test(test_chat_conv_parse_reads_role_and_content),
        cmocka_unit_test(test_chat_conv_parse_rejects_bad_conversations),
        cmocka_unit_test(test_chat_conv_load_reads_a_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
