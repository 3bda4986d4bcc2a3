/*
 * jw.c - a small streaming JSON writer for --json outputs.
 *
 * Writes to a caller-owned FILE*. Strings are escaped; bytes that are not
 * valid UTF-8 become U+FFFD so the output is always valid JSON. Integers
 * are printed exactly (no double rounding above 2^53).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ruvllm.h"

void rvl_jw_init(rvl_jw *w, FILE *out, bool pretty)
{
    memset(w, 0, sizeof *w);
    w->out = out;
    w->pretty = pretty;
}

static void indent(rvl_jw *w)
{
    if (!w->pretty)
        return;
    fputc('\n', w->out);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->out);
}

/* Before a value: comma if needed; nothing after a key. */
static void pre_value(rvl_jw *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0) {
        if (w->count[w->depth])
            fputc(',', w->out);
        indent(w);
    }
    w->count[w->depth]++;
}

static int utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    int len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return -1;
    if ((size_t)len > n)
        return -1;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    return len;
}

void rvl_jw_strn(rvl_jw *w, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    pre_value(w);
    fputc('"', w->out);
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x80) {
            switch (c) {
            case '"': fputs("\\\"", w->out); break;
            case '\\': fputs("\\\\", w->out); break;
            case '\n': fputs("\\n", w->out); break;
            case '\r': fputs("\\r", w->out); break;
            case '\t': fputs("\\t", w->out); break;
            case '\b': fputs("\\b", w->out); break;
            case '\f': fputs("\\f", w->out); break;
            default:
                if (c < 0x20 || c == 0x7f)
                    fprintf(w->out, "\\u%04x", c);
                else
                    fputc((int)c, w->out);
            }
            i++;
            continue;
        }
        int l = utf8_len(p + i, n - i);
        if (l < 0) {
            fputs("\\ufffd", w->out);
            i++;
        } else {
            fwrite(p + i, 1, (size_t)l, w->out);
            i += (size_t)l;
        }
    }
    fputc('"', w->out);
}

void rvl_jw_str(rvl_jw *w, const char *s)
{
    if (!s) {
        rvl_jw_null(w);
        return;
    }
    rvl_jw_strn(w, s, strlen(s));
}

void rvl_jw_key(rvl_jw *w, const char *k)
{
    rvl_jw_strn(w, k, strlen(k));
    fputs(w->pretty ? ": " : ":", w->out);
    w->after_key = true;
}

void rvl_jw_u64(rvl_jw *w, uint64_t v)
{
    pre_value(w);
    fprintf(w->out, "%llu", (unsigned long long)v);
}

void rvl_jw_i64(rvl_jw *w, int64_t v)
{
    pre_value(w);
    fprintf(w->out, "%lld", (long long)v);
}

void rvl_jw_f64(rvl_jw *w, double v)
{
    pre_value(w);
    if (!isfinite(v))
        fputs("null", w->out); /* JSON has no NaN/Inf */
    else
        fprintf(w->out, "%.17g", v);
}

void rvl_jw_f32(rvl_jw *w, float v)
{
    pre_value(w);
    if (!isfinite(v))
        fputs("null", w->out);
    else
        fprintf(w->out, "%.9g", (double)v);
}

void rvl_jw_bool(rvl_jw *w, bool v)
{
    pre_value(w);
    fputs(v ? "true" : "false", w->out);
}

void rvl_jw_null(rvl_jw *w)
{
    pre_value(w);
    fputs("null", w->out);
}

static void open_(rvl_jw *w, char c)
{
    pre_value(w);
    fputc(c, w->out);
    if (w->depth + 1 < RVL_JW_MAX_DEPTH)
        w->depth++;
    w->count[w->depth] = 0;
}

static void close_(rvl_jw *w, char c)
{
    bool empty = w->count[w->depth] == 0;
    if (w->depth > 0)
        w->depth--;
    if (!empty)
        indent(w);
    fputc(c, w->out);
    if (w->depth == 0 && w->pretty)
        fputc('\n', w->out);
}

void rvl_jw_obj(rvl_jw *w) { open_(w, '{'); }
void rvl_jw_obj_end(rvl_jw *w) { close_(w, '}'); }
void rvl_jw_arr(rvl_jw *w) { open_(w, '['); }
void rvl_jw_arr_end(rvl_jw *w) { close_(w, ']'); }
