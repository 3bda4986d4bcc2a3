/*
 * think.c - a thinking model's reasoning told apart from its answer as the
 * reply streams (lib/ruvllm.h, "Reasoning text"): Qwen3's and DeepSeek-R1's
 * <think>...</think>, and gpt-oss's harmony channels.
 *
 * The reply is cut into parts by a small state machine that looks at one
 * byte at a time, so a tag split over any number of tokens is found; the
 * bytes that might still become a tag are held back (at most the tag's
 * length, or the whitespace before an opening tag up to pend's size) and
 * go out as soon as they are decided.
 */
#include <string.h>

#include "ruvllm.h"

static const char OPEN[] = "<think>", CLOSE[] = "</think>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

enum {
    S_START,    /* only whitespace so far, maybe the start of <think> */
    S_THINK,    /* inside the reasoning; pend is a prefix of </think> */
    S_AFTER,    /* right after </think>: whitespace goes with the tag */
    S_ANSWER,   /* the rest is answer */
};

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* harmony (gpt-oss) */
enum {
    H_START = 16,   /* pend is a prefix of a header's opening, maybe */
    H_HEAD,         /* in a header; pend is its last bytes (a window) */
    H_BODY,         /* in a message body; pend is a prefix of an end tag */
    H_PLAIN,        /* not harmony: the rest is answer */
};
static const char *const H_OPENERS[] = {"<|channel|>", "<|start|>", " to=", NULL};
static const char *const H_ENDS[] = {"<|end|>", "<|return|>", "<|call|>", NULL};
static const char H_MESSAGE[] = "<|message|>", H_CHANNEL[] = "<|channel|>";

static int harmony_push(rvl_think *t, const char *s, size_t n, rvl_think_sink sink, void *ud);
static int harmony_flush(rvl_think *t, rvl_think_sink sink, void *ud);

void rvl_think_init(rvl_think *t, bool inside)
{
    rvl_think_init_format(t, RVL_THINK_TAGS, inside);
}

void rvl_think_init_format(rvl_think *t, rvl_think_format format, bool inside)
{
    memset(t, 0, sizeof *t);
    t->format = format;
    t->name_at = -1;
    if (format == RVL_THINK_HARMONY)
        t->state = inside ? H_BODY : H_START;
    else
        t->state = inside ? S_THINK : S_START;
}

static const char *last_of(const char *s, size_t n, const char *tag)
{
    const char *last = NULL;
    size_t l = strlen(tag);
    for (const char *p = s; p && (p = memmem(p, n - (size_t)(p - s), tag, l)); p++)
        last = p;
    return last;
}

/* harmony: does the prompt end inside a message body (its last <|message|>
 * after every end or start tag), and on which channel? */
static bool harmony_prompt_inside(const char *prompt, size_t n, bool *analysis)
{
    static const char *const stops[] = {"<|end|>", "<|return|>", "<|call|>", "<|start|>", NULL};
    *analysis = false;
    const char *msg = last_of(prompt, n, H_MESSAGE);
    if (!msg)
        return false;
    const char *head = prompt;
    for (const char *const *t = stops; *t; t++) {
        const char *p = last_of(prompt, n, *t);
        if (p && p > msg)
            return false;
        if (p && p + strlen(*t) > head)
            head = p + strlen(*t);
    }
    const char *ch = last_of(head, (size_t)(msg - head), H_CHANNEL);
    if (ch) {
        const char *name = ch + sizeof H_CHANNEL - 1;
        size_t k = strcspn(name, " <");
        *analysis = k == 8 && name + k <= msg && memcmp(name, "analysis", 8) == 0;
    }
    return true;
}

void rvl_think_init_prompt(rvl_think *t, rvl_think_format format, const char *prompt, size_t n)
{
    if (format != RVL_THINK_HARMONY) {
        rvl_think_init_format(t, format, rvl_think_prompt_inside(prompt, n));
        return;
    }
    bool analysis;
    rvl_think_init_format(t, format, prompt && harmony_prompt_inside(prompt, n, &analysis));
    t->analysis = t->state == H_BODY && analysis;
}

bool rvl_think_prompt_inside(const char *prompt, size_t n)
{
    const char *open = NULL, *close = NULL;
    for (const char *p = prompt; p && (p = memmem(p, n - (size_t)(p - prompt), OPEN, OPEN_LEN)); p++)
        open = p;
    for (const char *p = prompt; p && (p = memmem(p, n - (size_t)(p - prompt), CLOSE, CLOSE_LEN)); p++)
        close = p;
    return open && (!close || close < open);
}

static int out(rvl_think_sink sink, void *ud, rvl_think_part part, const char *s, size_t n)
{
    return n ? sink(ud, part, s, n) : 0;
}

/* S_START: is pend (whitespace, then part of "<think>") still undecided?
 * 1: complete tag, 0: undecided, -1: not a tag. */
static int start_match(const rvl_think *t)
{
    size_t ws = 0;
    while (ws < t->n_pend && is_space(t->pend[ws]))
        ws++;
    size_t k = t->n_pend - ws;
    if (k > OPEN_LEN || memcmp(t->pend + ws, OPEN, k) != 0)
        return -1;
    return k == OPEN_LEN ? 1 : 0;
}

int rvl_think_push(rvl_think *t, const char *s, size_t n, rvl_think_sink sink, void *ud)
{
    if (t->format == RVL_THINK_HARMONY)
        return harmony_push(t, s, n, sink, ud);
    int rc = 0;
    size_t i = 0;
    while (i < n && rc >= 0) {
        switch (t->state) {
        case S_START:
            if (t->n_pend == sizeof t->pend) {   /* a long run of whitespace: not waiting */
                rc = out(sink, ud, RVL_THINK_ANSWER, t->pend, t->n_pend);
                t->n_pend = 0;
                t->state = S_ANSWER;
                break;
            }
            t->pend[t->n_pend++] = s[i++];
            switch (start_match(t)) {
            case 1:
                rc = out(sink, ud, RVL_THINK_TAG, t->pend, t->n_pend);
                t->n_pend = 0;
                t->state = S_THINK;
                break;
            case -1:
                rc = out(sink, ud, RVL_THINK_ANSWER, t->pend, t->n_pend);
                t->n_pend = 0;
                t->state = S_ANSWER;
                break;
            }
            break;
        case S_THINK: {
            /* the reasoning up to a possible '<' goes out in one piece */
            size_t j = i;
            if (t->n_pend == 0) {
                while (j < n && s[j] != '<')
                    j++;
                rc = out(sink, ud, RVL_THINK_REASONING, s + i, j - i);
                i = j;
                if (i == n || rc < 0)
                    break;
            }
            char c = s[i++];
            if (c == CLOSE[t->n_pend]) {
                t->pend[t->n_pend++] = c;
                if (t->n_pend == CLOSE_LEN) {
                    rc = out(sink, ud, RVL_THINK_TAG, t->pend, t->n_pend);
                    t->n_pend = 0;
                    t->state = S_AFTER;
                }
            } else {
                /* not the tag: what was held is reasoning; c may start a new one */
                rc = out(sink, ud, RVL_THINK_REASONING, t->pend, t->n_pend);
                t->n_pend = 0;
                if (c == '<')
                    t->pend[t->n_pend++] = c;
                else if (rc >= 0)
                    rc = out(sink, ud, RVL_THINK_REASONING, &c, 1);
            }
            break;
        }
        case S_AFTER: {
            size_t j = i;
            while (j < n && is_space(s[j]))
                j++;
            rc = out(sink, ud, RVL_THINK_TAG, s + i, j - i);
            i = j;
            if (i < n)
                t->state = S_ANSWER;
            break;
        }
        default:
            rc = out(sink, ud, RVL_THINK_ANSWER, s + i, n - i);
            i = n;
            break;
        }
    }
    return rc < 0 ? rc : 0;
}

int rvl_think_flush(rvl_think *t, rvl_think_sink sink, void *ud)
{
    if (t->format == RVL_THINK_HARMONY)
        return harmony_flush(t, sink, ud);
    int rc = 0;
    if (t->state == S_START)
        rc = out(sink, ud, RVL_THINK_ANSWER, t->pend, t->n_pend);
    else if (t->state == S_THINK)
        rc = out(sink, ud, RVL_THINK_REASONING, t->pend, t->n_pend);
    t->n_pend = 0;
    return rc < 0 ? rc : 0;
}

/* ======================================================================
 * Harmony: <|channel|>NAME<|message|>BODY<|end|><|start|>ROLE<|channel|>...
 * ====================================================================== */

/* Is p[0..n) a prefix of one of list (2), all of one (1), or neither (0)? */
static int prefix_of(const char *const *list, const char *p, size_t n)
{
    int r = 0;
    for (; *list; list++) {
        size_t l = strlen(*list);
        if (n <= l && memcmp(*list, p, n) == 0) {
            if (n == l)
                return 1;
            r = 2;
        }
    }
    return r;
}

static bool ends_with(const rvl_think *t, const char *tag)
{
    size_t l = strlen(tag);
    return t->n_pend >= l && memcmp(t->pend + t->n_pend - l, tag, l) == 0;
}

/* One header byte into the window; true when it ends the header. The
 * channel's name is matched against "analysis" as it comes (name_at: the
 * bytes of it matched, NAME_OTHER once it is another name, NAME_NONE
 * outside a name); the name ends at a space or a '<'. */
enum { NAME_NONE = -1, NAME_OTHER = 99 };
static bool head_byte(rvl_think *t, char c)
{
    static const char ANALYSIS[] = "analysis";
    if (t->n_pend == sizeof t->pend) {   /* keep the last bytes: tags are short */
        memmove(t->pend, t->pend + sizeof t->pend / 2, sizeof t->pend / 2);
        t->n_pend = sizeof t->pend / 2;
    }
    t->pend[t->n_pend++] = c;
    if (t->name_at != NAME_NONE) {
        if (c == ' ' || c == '<') {
            t->analysis = t->name_at == (int)sizeof ANALYSIS - 1;
            t->name_at = NAME_NONE;
        } else if (t->name_at < (int)sizeof ANALYSIS - 1 && c == ANALYSIS[t->name_at]) {
            t->name_at++;
        } else {
            t->name_at = NAME_OTHER;
        }
    }
    if (ends_with(t, H_CHANNEL)) {
        t->analysis = false;
        t->name_at = 0;
    }
    return ends_with(t, H_MESSAGE);
}

static int harmony_push(rvl_think *t, const char *s, size_t n, rvl_think_sink sink, void *ud)
{
    int rc = 0;
    size_t i = 0;
    while (i < n && rc >= 0) {
        switch (t->state) {
        case H_START:
            t->pend[t->n_pend++] = s[i++];
            switch (prefix_of(H_OPENERS, t->pend, t->n_pend)) {
            case 1:   /* a header: its bytes are tags; the window keeps them */
                rc = out(sink, ud, RVL_THINK_TAG, t->pend, t->n_pend);
                t->state = H_HEAD;
                t->analysis = false;
                t->name_at = ends_with(t, H_CHANNEL) ? 0 : NAME_NONE;
                break;
            case 0:
                rc = out(sink, ud, RVL_THINK_ANSWER, t->pend, t->n_pend);
                t->n_pend = 0;
                t->state = H_PLAIN;
                break;
            }
            break;
        case H_HEAD: {
            size_t j = i;
            bool done = false;
            while (j < n && !done)
                done = head_byte(t, s[j++]);
            rc = out(sink, ud, RVL_THINK_TAG, s + i, j - i);
            i = j;
            if (done) {
                t->n_pend = 0;
                t->state = H_BODY;
            }
            break;
        }
        case H_BODY: {
            const rvl_think_part part = t->analysis ? RVL_THINK_REASONING : RVL_THINK_ANSWER;
            size_t j = i;
            if (t->n_pend == 0) {   /* the body up to a possible '<' in one piece */
                while (j < n && s[j] != '<')
                    j++;
                rc = out(sink, ud, part, s + i, j - i);
                i = j;
                if (i == n || rc < 0)
                    break;
            }
            t->pend[t->n_pend++] = s[i++];
            switch (prefix_of(H_ENDS, t->pend, t->n_pend)) {
            case 1:   /* the message ends; a header may follow */
                rc = out(sink, ud, RVL_THINK_TAG, t->pend, t->n_pend);
                t->n_pend = 0;
                t->analysis = false;
                t->name_at = NAME_NONE;
                t->state = H_HEAD;
                break;
            case 0: {   /* not a tag: the held bytes are body; the last may start one */
                char c = t->pend[--t->n_pend];
                rc = out(sink, ud, part, t->pend, t->n_pend);
                t->n_pend = 0;
                if (c == '<')
                    t->pend[t->n_pend++] = c;
                else if (rc >= 0)
                    rc = out(sink, ud, part, &c, 1);
                break;
            }
            }
            break;
        }
        default:
            rc = out(sink, ud, RVL_THINK_ANSWER, s + i, n - i);
            i = n;
            break;
        }
    }
    return rc < 0 ? rc : 0;
}

static int harmony_flush(rvl_think *t, rvl_think_sink sink, void *ud)
{
    int rc = 0;
    if (t->state == H_START)
        rc = out(sink, ud, RVL_THINK_ANSWER, t->pend, t->n_pend);
    else if (t->state == H_BODY)
        rc = out(sink, ud, t->analysis ? RVL_THINK_REASONING : RVL_THINK_ANSWER, t->pend, t->n_pend);
    if (t->state != H_HEAD)   /* the header's window is not text held back */
        t->n_pend = 0;
    return rc < 0 ? rc : 0;
}
