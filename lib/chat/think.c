/*
 * think.c - a thinking model's reasoning told apart from its answer as the
 * reply streams (lib/ruvllm.h, "Reasoning text").
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

void rvl_think_init(rvl_think *t, bool inside)
{
    memset(t, 0, sizeof *t);
    t->state = inside ? S_THINK : S_START;
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
    int rc = 0;
    if (t->state == S_START)
        rc = out(sink, ud, RVL_THINK_ANSWER, t->pend, t->n_pend);
    else if (t->state == S_THINK)
        rc = out(sink, ud, RVL_THINK_REASONING, t->pend, t->n_pend);
    t->n_pend = 0;
    return rc < 0 ? rc : 0;
}
