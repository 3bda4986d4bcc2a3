/*
 * test_chat_think.c - Qwen3's thinking switch and the reasoning splitter
 * (lib/chat/think.c): enable_thinking reaches the template and the
 * built-in qwen3 format; a streamed reply is cut into reasoning, tags and
 * answer whatever the token boundaries, and a reply cut before </think>
 * is all reasoning.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_io.h"

static char *must_slurp(const char *path, size_t *len)
{
    char *p = test_slurp(path, len);
    if (!p)
        fail_msg("cannot read %s (run from the repository root)", path);
    return p;
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

/* What a sink collected: each part's bytes, and the whole in order. */
typedef struct {
    rvl_buf part[3];
    rvl_buf all;
    int calls;
    int fail_at;    /* > 0: that call returns RVL_EIO */
} sink_t;

static int sink(void *ud, rvl_think_part part, const char *s, size_t n)
{
    sink_t *k = ud;
    assert_true(n > 0);
    assert_true(part >= RVL_THINK_ANSWER && part <= RVL_THINK_TAG);
    if (++k->calls == k->fail_at)
        return RVL_EIO;
    assert_int_equal(rvl_buf_add(&k->part[part], s, n), 0);
    assert_int_equal(rvl_buf_add(&k->all, s, n), 0);
    return 0;
}

static void sink_free(sink_t *k)
{
    for (int i = 0; i < 3; i++)
        rvl_buf_free(&k->part[i]);
    rvl_buf_free(&k->all);
}

static void assert_buf(const rvl_buf *b, const char *want)
{
    size_t n = strlen(want);
    if (b->n != n || (n && memcmp(b->p, want, n)))
        fail_msg("got '%.*s', want '%s'", (int)b->n, b->p ? b->p : "", want);
}

/* Feed text in pieces of `step` bytes (0: one piece). */
static void feed_format(sink_t *k, rvl_think_format format, const char *text, size_t step, bool inside)
{
    rvl_think t;
    rvl_think_init_format(&t, format, inside);
    size_t n = strlen(text);
    if (!step)
        step = n ? n : 1;
    for (size_t i = 0; i < n; i += step)
        assert_int_equal(rvl_think_push(&t, text + i, i + step > n ? n - i : step, sink, k), 0);
    assert_int_equal(rvl_think_flush(&t, sink, k), 0);
}

/* Every way of cutting the text into tokens of 1..len bytes gives the same
 * parts: the tags are found across any boundary. */
static void check_split_format(rvl_think_format format, const char *text, bool inside, const char *answer,
                               const char *reasoning, const char *tags)
{
    for (size_t step = 0; step <= strlen(text); step++) {
        sink_t k = {0};
        feed_format(&k, format, text, step, inside);
        assert_buf(&k.part[RVL_THINK_ANSWER], answer);
        assert_buf(&k.part[RVL_THINK_REASONING], reasoning);
        assert_buf(&k.part[RVL_THINK_TAG], tags);
        assert_buf(&k.all, text);   /* nothing lost, nothing reordered */
        sink_free(&k);
    }
}

static void check_split(const char *text, bool inside, const char *answer, const char *reasoning,
                        const char *tags)
{
    check_split_format(RVL_THINK_TAGS, text, inside, answer, reasoning, tags);
}

/* harmony: also every cut of the reply into two pieces at any byte */
static void check_harmony(const char *text, const char *answer, const char *reasoning, const char *tags)
{
    check_split_format(RVL_THINK_HARMONY, text, false, answer, reasoning, tags);
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) {
        sink_t k = {0};
        rvl_think t;
        rvl_think_init_format(&t, RVL_THINK_HARMONY, false);
        assert_int_equal(rvl_think_push(&t, text, cut, sink, &k), 0);
        assert_int_equal(rvl_think_push(&t, text + cut, n - cut, sink, &k), 0);
        assert_int_equal(rvl_think_flush(&t, sink, &k), 0);
        assert_buf(&k.part[RVL_THINK_ANSWER], answer);
        assert_buf(&k.part[RVL_THINK_REASONING], reasoning);
        assert_buf(&k.all, text);
        sink_free(&k);
    }
}

static void test_think_splits_reasoning_from_answer(void **s)
{
    (void)s;
    check_split("<think>\nLet me add.\n</think>\n\nThe answer is 4.", false,
                "The answer is 4.", "\nLet me add.\n", "<think></think>\n\n");
    /* whitespace before the opening tag goes with it */
    check_split("\n <think>x</think>y", false, "y", "x", "\n <think></think>");
    /* a reply without reasoning is all answer, also one that only looks like a tag */
    check_split("Hello <think>not a tag</think>", false, "Hello <think>not a tag</think>", "", "");
    check_split("<thin>k", false, "<thin>k", "", "");
    check_split("  \n", false, "  \n", "", "");
    check_split("", false, "", "", "");
    /* '<' inside the reasoning, and a partial close tag, stay reasoning */
    check_split("<think>a<b </thi </think x<</think>ok", false, "ok", "a<b </thi </think x<",
                "<think></think>");
    /* Qwen3 with thinking off writes an empty block itself (in the prompt) */
    check_split("<think>\n\n</think>\n\nHi", false, "Hi", "\n\n", "<think></think>\n\n");
}

static void test_think_reply_cut_before_the_close_tag_is_reasoning(void **s)
{
    (void)s;
    /* -n stopped the reply inside the reasoning: all of it, the partial
     * close tag too, is reasoning, and the answer is empty */
    check_split("<think>\nStill thinking</thi", false, "", "\nStill thinking</thi", "<think>");
    check_split("<think>", false, "", "", "<think>");
    /* cut inside the opening tag: not decided, so it is answer text */
    check_split("<thi", false, "<thi", "", "");
}

static void test_think_prompt_that_opens_the_section(void **s)
{
    (void)s;
    /* DeepSeek-R1's generation prompt ends with <think>\n: the reply starts inside */
    static const char r1[] = "<\xef\xbd\x9cUser\xef\xbd\x9c>Hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n";
    assert_true(rvl_think_prompt_inside(r1, sizeof r1 - 1));
    static const char off[] = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_false(rvl_think_prompt_inside(off, sizeof off - 1));
    static const char on[] = "<|im_start|>assistant\n";
    assert_false(rvl_think_prompt_inside(on, sizeof on - 1));
    assert_false(rvl_think_prompt_inside("", 0));
    check_split("Reasoning.\n</think>\n\nAnswer.", true, "Answer.", "Reasoning.\n", "</think>\n\n");
}

/* gpt-oss's reply after the generation prompt "<|start|>assistant", as
 * the detokenizer writes it with special tokens: the analysis channel is
 * the reasoning, the final channel the answer, headers and <|end|> tags. */
static void test_think_harmony_splits_analysis_from_final(void **s)
{
    (void)s;
    check_harmony("<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.",
                  "2 + 2 = 4.", "User asks 2+2. Answer 4.",
                  "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>");
    /* the end tags, when the text has them, are tags; '<' and partial tags in a body stay */
    check_harmony("<|channel|>analysis<|message|>a<b <|en <|end <|end|><|start|>assistant<|channel|>final"
                  "<|message|>x < y <|retur<|return|>",
                  "x < y <|retur", "a<b <|en <|end ",
                  "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|><|return|>");
    /* no reasoning: the final channel straight away; non-ASCII bodies */
    check_harmony("<|channel|>final<|message|>Grüße 🌍", "Grüße 🌍", "",
                  "<|channel|>final<|message|>");
    /* a tool call: commentary is not reasoning; the header's recipient and
     * constraint are tags */
    check_harmony("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get"
                  "<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
                  "{\"city\":\"Paris\"}", "Need weather.",
                  "<|channel|>analysis<|message|><|end|><|start|>assistant to=functions.get<|channel|>commentary "
                  "<|constrain|>json<|message|><|call|>");
    check_harmony(" to=functions.now<|channel|>commentary json<|message|>{}", "{}", "",
                  " to=functions.now<|channel|>commentary json<|message|>");
    /* a channel whose name only begins like analysis is not reasoning */
    check_harmony("<|channel|>analysisx<|message|>A<|end|><|channel|>analysi<|message|>B", "AB", "",
                  "<|channel|>analysisx<|message|><|end|><|channel|>analysi<|message|>");
    /* a reply that does not open with a header is all answer */
    check_harmony("Plain text <|channel|>analysis<|message|>x", "Plain text <|channel|>analysis<|message|>x",
                  "", "");
    check_harmony("<html>", "<html>", "", "");
    check_harmony("", "", "", "");
    /* cut by -n: inside the analysis it is all reasoning; inside a header nothing is said */
    check_harmony("<|channel|>analysis<|message|>Thinking <|en", "", "Thinking <|en",
                  "<|channel|>analysis<|message|>");
    check_harmony("<|channel|>analysis<|message|>T<|end|><|start|>assistant<|chan", "", "T",
                  "<|channel|>analysis<|message|><|end|><|start|>assistant<|chan");
}

/* Split a reply after a rendered prompt, in pieces of every size. */
static void check_after_prompt(rvl_think_format format, const char *prompt, const char *reply,
                               const char *answer, const char *reasoning)
{
    for (size_t step = 1; step <= strlen(reply) + 1; step++) {
        sink_t k = {0};
        rvl_think t;
        rvl_think_init_prompt(&t, format, prompt, strlen(prompt));
        for (size_t i = 0; i < strlen(reply); i += step)
            assert_int_equal(rvl_think_push(&t, reply + i, i + step > strlen(reply) ? strlen(reply) - i : step,
                                            sink, &k), 0);
        assert_int_equal(rvl_think_flush(&t, sink, &k), 0);
        assert_buf(&k.part[RVL_THINK_ANSWER], answer);
        assert_buf(&k.part[RVL_THINK_REASONING], reasoning);
        sink_free(&k);
    }
}

static void test_think_harmony_prompt_that_opens_a_message(void **s)
{
    (void)s;
    check_split_format(RVL_THINK_HARMONY, "Answer.<|return|>", true, "Answer.", "", "<|return|>");
    /* gpt-oss's own generation prompt opens no message: the reply brings its header */
    static const char gen[] = "<|start|>user<|message|>Hi<|end|><|start|>assistant";
    check_after_prompt(RVL_THINK_HARMONY, gen, "<|channel|>analysis<|message|>R<|end|><|start|>assistant"
                       "<|channel|>final<|message|>A", "A", "R");
    /* a prompt that opened the analysis channel: the reply starts in the reasoning */
    check_after_prompt(RVL_THINK_HARMONY, "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>",
                       "Let me see.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", "Hello!", "Let me see.");
    /* ... or the final channel: answer */
    check_after_prompt(RVL_THINK_HARMONY, "<|start|>assistant<|channel|>final<|message|>", "Hello!", "Hello!", "");
    /* a closed message in the prompt opens nothing */
    check_after_prompt(RVL_THINK_HARMONY, "<|start|>assistant<|channel|>analysis<|message|>x<|end|>",
                       "Plain", "Plain", "");
    /* tags: as rvl_think_prompt_inside says */
    check_after_prompt(RVL_THINK_TAGS, "<|im_start|>assistant\n<think>\n", "R</think>A", "A", "R");
    check_after_prompt(RVL_THINK_TAGS, "<|im_start|>assistant\n", "R</think>A", "R</think>A", "");
}

static void test_think_sink_error_stops_the_push(void **s)
{
    (void)s;
    sink_t k = {.fail_at = 2};
    rvl_think t;
    rvl_think_init(&t, false);
    static const char txt[] = "<think>abc</think>def";
    assert_int_equal(rvl_think_push(&t, txt, sizeof txt - 1, sink, &k), RVL_EIO);
    sink_free(&k);
}

/* ---------------------------------------------------------------- the switch */

static char *format(rvl_chat *c, int think)
{
    static const rvl_chat_msg msgs[] = {{"user", "Hi"}};
    char *out = NULL;
    rvl_chat_set_thinking(c, think);
    assert_int_equal(rvl_chat_format(c, msgs, 1, true, &out, NULL), 0);
    return out;
}

static void test_thinking_switch_reaches_qwen3_template_and_builtin(void **s)
{
    (void)s;
    size_t len;
    char *src = must_slurp("tests/data/templates/qwen3.jinja", &len);
    rvl_chat *tm, *bi, *ml;
    assert_int_equal(rvl_chat_open(&tm, src, len, NULL, NULL, "<|im_end|>", NULL), 0);
    assert_int_equal(rvl_chat_family_of(tm), RVL_CHAT_QWEN3);
    assert_int_equal(rvl_chat_open(&bi, NULL, 0, "qwen3", NULL, "<|im_end|>", NULL), 0);
    for (int k = 0; k < 2; k++) {
        rvl_chat *c = k ? bi : tm;
        assert_true(rvl_chat_has_reasoning(c));
        char *dflt = format(c, -1), *on = format(c, 1), *off = format(c, 0);
        assert_string_equal(dflt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        assert_string_equal(on, dflt);   /* the template's default is on */
        assert_string_equal(off, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                                 "<think>\n\n</think>\n\n");
        free(dflt);
        free(on);
        free(off);
    }
    /* a template that knows nothing of thinking renders the same either way */
    assert_int_equal(rvl_chat_open(&ml, NULL, 0, "chatml", NULL, NULL, NULL), 0);
    assert_false(rvl_chat_has_reasoning(ml));
    char *a = format(ml, 0), *b = format(ml, -1);
    assert_string_equal(a, b);
    free(a);
    free(b);
    rvl_chat_close(ml);
    rvl_chat_close(tm);
    rvl_chat_close(bi);
    free(src);
}

/* gpt-oss: its template (and the built-in) is harmony, the reply is split
 * by channels, reasoning_effort reaches the template, and the reply ends
 * at <|return|> or <|call|>, not at <|end|>. */
static void test_gpt_oss_template_effort_and_stops(void **s)
{
    (void)s;
    size_t len;
    char *src = must_slurp("tests/data/templates/gpt-oss.jinja", &len);
    rvl_chat *tm, *bi;
    assert_int_equal(rvl_chat_open(&tm, src, len, NULL, "<|startoftext|>", "<|return|>", NULL), 0);
    assert_int_equal(rvl_chat_open(&bi, NULL, 0, "gpt-oss", NULL, NULL, NULL), 0);
    for (int k = 0; k < 2; k++) {
        rvl_chat *c = k ? bi : tm;
        assert_int_equal(rvl_chat_family_of(c), RVL_CHAT_GPT_OSS);
        assert_true(rvl_chat_has_reasoning(c));
        assert_int_equal(rvl_chat_think_format(c), RVL_THINK_HARMONY);
        const char *const *st = rvl_chat_stops(c);
        assert_string_equal(st[0], "<|return|>");
        assert_string_equal(st[1], "<|call|>");
        assert_null(st[2]);
        char *dflt = format(c, -1);
        assert_non_null(strstr(dflt, "\nReasoning: medium\n"));
        assert_true(strlen(dflt) > 18 && !strcmp(dflt + strlen(dflt) - 18, "<|start|>assistant"));
        assert_int_equal(rvl_chat_set_reasoning_effort(c, "high"), 0);
        char *high = format(c, -1);
        assert_non_null(strstr(high, "\nReasoning: high\n"));
        assert_int_equal(rvl_chat_set_reasoning_effort(c, "low"), 0);
        char *low = format(c, 1);   /* with enable_thinking too: both reach the template */
        assert_non_null(strstr(low, "\nReasoning: low\n"));
        assert_int_equal(rvl_chat_set_reasoning_effort(c, NULL), 0);
        char *back = format(c, -1);
        assert_string_equal(back, dflt);
        free(dflt);
        free(high);
        free(low);
        free(back);
        assert_int_equal(rvl_chat_set_reasoning_effort(c, "\"}, \"x\": 1"), RVL_EINVAL);
        assert_int_equal(rvl_chat_set_reasoning_effort(c, ""), RVL_EINVAL);
        assert_int_equal(rvl_chat_set_reasoning_effort(c, "extraordinarilyhigh"), RVL_EINVAL);
    }
    rvl_chat_close(tm);
    rvl_chat_close(bi);
    free(src);
    /* Qwen3 stays <think> */
    rvl_chat *q;
    assert_int_equal(rvl_chat_open(&q, NULL, 0, "qwen3", NULL, NULL, NULL), 0);
    assert_int_equal(rvl_chat_think_format(q), RVL_THINK_TAGS);
    rvl_chat_close(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_think_splits_reasoning_from_answer),
        cmocka_unit_test(test_think_reply_cut_before_the_close_tag_is_reasoning),
        cmocka_unit_test(test_think_prompt_that_opens_the_section),
        cmocka_unit_test(test_think_harmony_splits_analysis_from_final),
        cmocka_unit_test(test_think_harmony_prompt_that_opens_a_message),
        cmocka_unit_test(test_think_sink_error_stops_the_push),
        cmocka_unit_test(test_thinking_switch_reaches_qwen3_template_and_builtin),
        cmocka_unit_test(test_gpt_oss_template_effort_and_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
