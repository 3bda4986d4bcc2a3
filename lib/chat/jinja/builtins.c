/*
 * builtins.c - filters, tests, methods of str/dict/list values and
 * the globals of the chat-template engine, each behaving as jinja2 3.1
 * and Python 3 do for the values templates pass them. tojson is
 * transformers' own: json.dumps(x, ensure_ascii=False, indent=indent,
 * separators=separators, sort_keys=sort_keys), not HTML-escaped.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "chat/jinja/jinja_int.h"

/* ====================================================================
 * Arguments
 * ==================================================================== */

static const jv *argp(const jargs *a, size_t i, const char *kw)
{
    if (i < a->npos) return &a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (kw && !strcmp(a->kwn[k], kw)) return &a->kwv[k];
    return NULL;
}

static void nargs_max(jr *r, const jnode *at, const char *what, const jargs *a, size_t maxpos)
{
    if (a->npos > maxpos)
        jfail(r, at, "%s takes at most %zu argument(s) (%zu given)", what, maxpos, a->npos);
}

static const jv *need_str(jr *r, const jnode *at, const jv *v, const char *what)
{
    if (!v || v->t != JV_STR) {
        if (v && v->t == JV_UNDEF) jfail_undef(r, at, v);
        jfail(r, at, "%s must be a string, not %s", what, v ? jv_typename(v) : "nothing");
    }
    return v;
}

static int64_t need_int(jr *r, const jnode *at, const jv *v, const char *what)
{
    if (!v || (v->t != JV_INT && v->t != JV_BOOL)) {
        if (v && v->t == JV_UNDEF) jfail_undef(r, at, v);
        jfail(r, at, "%s must be an integer, not %s", what, v ? jv_typename(v) : "nothing");
    }
    return v->t == JV_INT ? v->i : v->b;
}

static jv mk_list(jr *r, size_t n, jv **items)
{
    *items = ja_alloc(r->ar, (n + 1) * sizeof **items);
    return jv_list(*items, n);
}

static jv mk_str(jr *r, const char *s, size_t n)
{
    return jv_strn(ja_strndup(r->ar, s, n), n);
}

/* ====================================================================
 * Strings
 * ==================================================================== */

static void put_cp(jbuf *b, uint32_t cp)
{
    uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, tmp);
    if (k > 0) jb_put(b, (const char *)tmp, (size_t)k);
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE };

static bool is_cased(uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->category == UTF8PROC_CATEGORY_LU || p->category == UTF8PROC_CATEGORY_LL ||
           p->category == UTF8PROC_CATEGORY_LT;
}

static void put_upper(jbuf *b, uint32_t cp)
{
    if (cp == 0xDF) { jb_put(b, "SS", 2); return; }   /* full case mapping of sharp s */
    put_cp(b, (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp));
}

static jv str_case(jr *r, const jv *s, int mode)
{
    jbuf b;
    jbuf_init(r, &b);
    jcharge(r, 1 + s->n / 32);
    size_t i = 0;
    bool prev_cased = false, first = true, word_start = true;
    while (i < s->n) {
        uint32_t cp = utf8_next(s->s, s->n, &i);
        switch (mode) {
        case CASE_UPPER: put_upper(&b, cp); break;
        case CASE_LOWER: put_cp(&b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp)); break;
        case CASE_CAPITALIZE:
            if (first) put_cp(&b, (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp));
            else put_cp(&b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            break;
        case CASE_TITLE: {   /* Python str.title() */
            bool c = is_cased(cp);
            if (c && !prev_cased) put_cp(&b, (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp));
            else if (c) put_cp(&b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            else put_cp(&b, cp);
            prev_cased = c;
            break;
        }
        default: {   /* jinja2's |title: words split at runs of [-\s({\[<] */
            bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
            if (sep) { put_cp(&b, cp); word_start = true; }
            else if (word_start) { put_upper(&b, cp); word_start = false; }
            else put_cp(&b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            break;
        }
        }
        first = false;
    }
    return jbuf_str(&b);
}

/* Does code point cp occur in chars? */
static bool in_chars(const jv *chars, uint32_t cp)
{
    size_t i = 0;
    while (i < chars->n)
        if (utf8_next(chars->s, chars->n, &i) == cp) return true;
    return false;
}

/* str.strip/lstrip/rstrip: whitespace, or the code points of `chars` */
static jv str_strip(jr *r, const jv *s, const jv *chars, bool left, bool right)
{
    jcharge(r, 1 + s->n / 64);
    bool ws = !chars || chars->t == JV_NONE || chars->t == JV_UNDEF;
    size_t a = 0, b = s->n;
    if (left)
        while (a < b) {
            size_t j = a;
            uint32_t cp = utf8_next(s->s, s->n, &j);
            if (ws ? !py_isspace(cp) : !in_chars(chars, cp)) break;
            a = j;
        }
    if (right)
        while (b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)s->s[j] & 0xC0) == 0x80) j--;
            size_t k = j;
            uint32_t cp = utf8_next(s->s, s->n, &k);
            if (ws ? !py_isspace(cp) : !in_chars(chars, cp)) break;
            b = j;
        }
    return jv_strn(s->s + a, b - a);
}

static jv str_split(jr *r, const jnode *at, const jv *s, const jv *sep, int64_t maxsplit)
{
    jcharge(r, 1 + s->n / 32);
    size_t cap = 8, n = 0;
    jv *items = ja_alloc(r->ar, cap * sizeof *items);
#define PUSH(x) do { if (n == cap) { jv *ni = ja_alloc(r->ar, cap * 2 * sizeof *ni); memcpy(ni, items, n * sizeof *ni); items = ni; cap *= 2; } items[n++] = (x); } while (0)
    if (!sep || sep->t == JV_NONE) {
        size_t i = 0;
        while (i < s->n) {
            size_t j = i;
            while (j < s->n) {   /* skip whitespace */
                size_t k = j;
                if (!py_isspace(utf8_next(s->s, s->n, &k))) break;
                j = k;
            }
            if (j >= s->n) break;
            if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
                /* the rest, right-stripped */
                jv rest = jv_strn(s->s + j, s->n - j);
                PUSH(str_strip(r, &rest, NULL, false, true));
                i = s->n;
                break;
            }
            size_t e = j;
            while (e < s->n) {
                size_t k = e;
                if (py_isspace(utf8_next(s->s, s->n, &k))) break;
                e = k;
            }
            PUSH(jv_strn(s->s + j, e - j));
            i = e;
        }
    } else {
        need_str(r, at, sep, "separator");
        if (sep->n == 0) jfail(r, at, "empty separator");
        size_t i = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || (int64_t)n < maxsplit)
                                  ? memmem(s->s + i, s->n - i, sep->s, sep->n) : NULL;
            if (!hit) { PUSH(jv_strn(s->s + i, s->n - i)); break; }
            PUSH(jv_strn(s->s + i, (size_t)(hit - (s->s + i))));
            i = (size_t)(hit - s->s) + sep->n;
        }
    }
#undef PUSH
    return jv_list(items, n);
}

static jv str_replace(jr *r, const jnode *at, const jv *s, const jv *old, const jv *new_, int64_t count)
{
    need_str(r, at, old, "replace() argument 1");
    need_str(r, at, new_, "replace() argument 2");
    jcharge(r, 1 + s->n / 32);
    jbuf b;
    jbuf_init(r, &b);
    if (old->n == 0) {
        /* Python inserts `new` before every code point and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (i <= s->n) {
            if (count < 0 || done < count) { jb_put(&b, new_->s, new_->n); done++; }
            if (i == s->n) break;
            size_t j = i;
            utf8_next(s->s, s->n, &j);
            jb_put(&b, s->s + i, j - i);
            i = j;
        }
        return jbuf_str(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i <= s->n) {
        const char *hit = (count < 0 || done < count) ? memmem(s->s + i, s->n - i, old->s, old->n) : NULL;
        if (!hit) { jb_put(&b, s->s + i, s->n - i); break; }
        jb_put(&b, s->s + i, (size_t)(hit - (s->s + i)));
        jb_put(&b, new_->s, new_->n);
        i = (size_t)(hit - s->s) + old->n;
        done++;
    }
    return jbuf_str(&b);
}

static bool str_startswith(jr *r, const jnode *at, const jv *s, const jv *pre, bool end)
{
    if (pre->t == JV_LIST && (pre->flag & JL_TUPLE)) {
        for (size_t i = 0; i < pre->n; i++)
            if (str_startswith(r, at, s, &pre->a[i], end)) return true;
        return false;
    }
    if (pre->t != JV_STR)
        jfail(r, at, "%s first arg must be str or a tuple of str, not %s",
              end ? "endswith" : "startswith", jv_typename(pre));
    if (pre->n > s->n) return false;
    return memcmp(end ? s->s + s->n - pre->n : s->s, pre->s, pre->n) == 0;
}

/* str.format() with {} / {0} / {name} fields (no format specs) */
static jv str_format(jr *r, const jnode *at, const jv *s, const jargs *a)
{
    jbuf b;
    jbuf_init(r, &b);
    size_t auto_i = 0;
    for (size_t i = 0; i < s->n; i++) {
        char c = s->s[i];
        if (c == '{' && i + 1 < s->n && s->s[i + 1] == '{') { jb_putc(&b, '{'); i++; continue; }
        if (c == '}' && i + 1 < s->n && s->s[i + 1] == '}') { jb_putc(&b, '}'); i++; continue; }
        if (c == '}') jfail(r, at, "single '}' encountered in format string");
        if (c != '{') { jb_putc(&b, c); continue; }
        const char *e = memchr(s->s + i, '}', s->n - i);
        if (!e) jfail(r, at, "single '{' encountered in format string");
        const char *f = s->s + i + 1;
        size_t fl = (size_t)(e - f);
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
            jfail(r, at, "format specifications are not supported in str.format");
        const jv *v = NULL;
        if (fl == 0) {
            v = auto_i < a->npos ? &a->pos[auto_i] : NULL;
            auto_i++;
            if (!v) jfail(r, at, "Replacement index %zu out of range for positional args tuple", auto_i - 1);
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = (size_t)strtoul(f, NULL, 10);
            if (k >= a->npos) jfail(r, at, "Replacement index %zu out of range for positional args tuple", k);
            v = &a->pos[k];
        } else {
            for (size_t k = 0; k < a->nkw; k++)
                if (strlen(a->kwn[k]) == fl && !memcmp(a->kwn[k], f, fl)) v = &a->kwv[k];
            if (!v) jfail(r, at, "'%.*s'", (int)fl, f);
        }
        jv_write(r, &b, v, false, 0);
        i = (size_t)(e - s->s);
    }
    return jbuf_str(&b);
}

/* printf-style "fmt % args" for %s %r %d %i %f %x %% */
jv jv_percent_format(jr *r, const jnode *at, const jv *fmt, const jv *args)
{
    jbuf b;
    jbuf_init(r, &b);
    size_t ai = 0;
    bool tuple = args->t == JV_LIST && (args->flag & JL_TUPLE);
    size_t nargs = tuple ? args->n : 1;
    for (size_t i = 0; i < fmt->n; i++) {
        char c = fmt->s[i];
        if (c != '%') { jb_putc(&b, c); continue; }
        if (++i >= fmt->n) jfail(r, at, "incomplete format");
        char spec[16] = "%";
        size_t sl = 1;
        while (i < fmt->n && strchr("-+ #0123456789.", fmt->s[i]) && sl < sizeof spec - 3) spec[sl++] = fmt->s[i++];
        if (i >= fmt->n) jfail(r, at, "incomplete format");
        char conv = fmt->s[i];
        if (conv == '%') { jb_putc(&b, '%'); continue; }
        if (ai >= nargs) jfail(r, at, "not enough arguments for format string");
        const jv *v = tuple ? &args->a[ai] : args;
        ai++;
        switch (conv) {
        case 's': case 'r': {
            jbuf t;
            jbuf_init(r, &t);
            jv_write(r, &t, v, conv == 'r', 0);
            spec[sl++] = 's';
            spec[sl] = 0;
            jb_printf(&b, spec, t.n ? t.p : "");
            break;
        }
        case 'd': case 'i': case 'x': case 'X': case 'o':
            if (v->t != JV_INT && v->t != JV_BOOL && v->t != JV_FLOAT)
                jfail(r, at, "%%%c format: a real number is required, not %s", conv, jv_typename(v));
            spec[sl++] = 'l'; spec[sl++] = 'l'; spec[sl++] = conv == 'i' ? 'd' : conv; spec[sl] = 0;
            jb_printf(&b, spec, (long long)(v->t == JV_FLOAT ? (long long)v->f : v->t == JV_INT ? v->i : v->b));
            break;
        case 'f': case 'F': case 'e': case 'g':
            if (v->t != JV_INT && v->t != JV_BOOL && v->t != JV_FLOAT)
                jfail(r, at, "must be real number, not %s", jv_typename(v));
            spec[sl++] = conv;
            spec[sl] = 0;
            jb_printf(&b, spec, v->t == JV_FLOAT ? v->f : (double)(v->t == JV_INT ? v->i : v->b));
            break;
        default:
            jfail(r, at, "unsupported format character '%c'", conv);
        }
    }
    if (ai < nargs) jfail(r, at, "not all arguments converted during string formatting");
    return jbuf_str(&b);
}

/* ====================================================================
 * JSON (Python json.dumps)
 * ==================================================================== */

typedef struct {
    const char *indent; size_t nindent;   /* NULL: single line */
    const char *item_sep; size_t nitem;
    const char *key_sep; size_t nkey;
    bool sort_keys;
} jjson;

static void json_str(jbuf *b, const char *s, size_t n)
{
    jb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') { run++; continue; }
        jb_put(b, s + i - run, run);
        run = 0;
        switch (c) {
        case '"': jb_put(b, "\\\"", 2); break;
        case '\\': jb_put(b, "\\\\", 2); break;
        case '\n': jb_put(b, "\\n", 2); break;
        case '\r': jb_put(b, "\\r", 2); break;
        case '\t': jb_put(b, "\\t", 2); break;
        case '\b': jb_put(b, "\\b", 2); break;
        case '\f': jb_put(b, "\\f", 2); break;
        default: jb_printf(b, "\\u%04x", c); break;
        }
    }
    jb_put(b, s + n - run, run);
    jb_putc(b, '"');
}

static void json_newline(jbuf *b, const jjson *o, int level)
{
    jb_putc(b, '\n');
    for (int k = 0; k < level; k++) jb_put(b, o->indent, o->nindent);
}

static void json_num(jbuf *b, const jv *v)
{
    char num[64];
    if (v->t == JV_INT) { jb_printf(b, "%lld", (long long)v->i); return; }
    if (isnan(v->f)) { jb_put(b, "NaN", 3); return; }
    if (isinf(v->f)) { if (v->f < 0) jb_put(b, "-Infinity", 9); else jb_put(b, "Infinity", 8); return; }
    jv_fmt_float(num, sizeof num, v->f);
    jb_put(b, num, strlen(num));
}

static int key_cmp_r(const void *x, const void *y)
{
    const jkv *a = *(const jkv *const *)x, *b = *(const jkv *const *)y;
    size_t n = a->k.n < b->k.n ? a->k.n : b->k.n;
    int c = memcmp(a->k.s, b->k.s, n);
    return c ? c : (a->k.n > b->k.n) - (a->k.n < b->k.n);
}

static void json_dump(jr *r, const jnode *at, jbuf *b, const jv *v, const jjson *o, int level)
{
    if (level > 200) jfail(r, at, "maximum recursion depth exceeded while encoding a JSON object");
    jcharge(r, 1);
    switch (v->t) {
    case JV_NONE: jb_put(b, "null", 4); return;
    case JV_BOOL: if (v->b) jb_put(b, "true", 4); else jb_put(b, "false", 5); return;
    case JV_INT: case JV_FLOAT: json_num(b, v); return;
    case JV_STR: jcharge(r, v->n / 64); json_str(b, v->s, v->n); return;
    case JV_LIST:
        if (v->flag & (JL_GEN | JL_VIEW)) break;
        if (!v->n) { jb_put(b, "[]", 2); return; }
        jb_putc(b, '[');
        for (size_t i = 0; i < v->n; i++) {
            if (i) jb_put(b, o->item_sep, o->nitem);
            if (o->indent) json_newline(b, o, level + 1);
            json_dump(r, at, b, &v->a[i], o, level + 1);
        }
        if (o->indent) json_newline(b, o, level);
        jb_putc(b, ']');
        return;
    case JV_DICT: {
        if (!v->n) { jb_put(b, "{}", 2); return; }
        const jkv **order = ja_alloc(r->ar, v->n * sizeof *order);
        for (size_t i = 0; i < v->n; i++) order[i] = &v->d[i];
        if (o->sort_keys) {
            for (size_t i = 0; i < v->n; i++)
                if (v->d[i].k.t != JV_STR) jfail(r, at, "sort_keys needs string keys");
            qsort(order, v->n, sizeof *order, key_cmp_r);
        }
        jb_putc(b, '{');
        for (size_t i = 0; i < v->n; i++) {
            const jv *k = &order[i]->k;
            if (i) jb_put(b, o->item_sep, o->nitem);
            if (o->indent) json_newline(b, o, level + 1);
            if (k->t == JV_STR) json_str(b, k->s, k->n);
            else if (k->t == JV_INT || k->t == JV_FLOAT) { jb_putc(b, '"'); json_num(b, k); jb_putc(b, '"'); }
            else if (k->t == JV_BOOL) jb_put(b, k->b ? "\"true\"" : "\"false\"", k->b ? 6 : 7);
            else if (k->t == JV_NONE) jb_put(b, "\"null\"", 6);
            else jfail(r, at, "keys must be str, int, float, bool or None, not %s", jv_typename(k));
            jb_put(b, o->key_sep, o->nkey);
            json_dump(r, at, b, &order[i]->v, o, level + 1);
        }
        if (o->indent) json_newline(b, o, level);
        jb_putc(b, '}');
        return;
    }
    default:
        break;
    }
    jfail(r, at, "Object of type %s is not JSON serializable", jv_typename(v));
}

static jv f_tojson(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jjson o = {0};
    const jv *ind = argp(a, 0, "indent");
    char *sp = NULL;
    if (ind && ind->t != JV_NONE) {
        if (ind->t == JV_STR) {
            o.indent = ind->s;
            o.nindent = ind->n;
        } else {
            int64_t w = need_int(r, at, ind, "indent");
            if (w < 0) w = 0;
            if (w > 1000) jfail(r, at, "indent too large");
            sp = ja_alloc(r->ar, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            o.indent = sp;
            o.nindent = (size_t)w;
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.nitem = strlen(o.item_sep);
    o.key_sep = ": ";
    o.nkey = 2;
    const jv *seps = argp(a, 99, "separators");
    if (seps && seps->t != JV_NONE) {
        if (seps->t != JV_LIST || seps->n != 2 || seps->a[0].t != JV_STR || seps->a[1].t != JV_STR)
            jfail(r, at, "separators must be a pair of strings");
        o.item_sep = seps->a[0].s; o.nitem = seps->a[0].n;
        o.key_sep = seps->a[1].s; o.nkey = seps->a[1].n;
    }
    const jv *sk = argp(a, 99, "sort_keys");
    o.sort_keys = sk && jv_truthy(sk);
    jbuf b;
    jbuf_init(r, &b);
    json_dump(r, at, &b, in, &o, 0);
    return jbuf_str(&b);
}

/* ====================================================================
 * Sorting (stable merge sort whose comparisons may fail with jfail)
 * ==================================================================== */

typedef struct { jr *r; const jnode *at; const jv *attr; bool ci, by_value; } sortctx;

static jv attr_path(jr *r, const jnode *at, const jv *item, const jv *attr);

static jv sort_key(const sortctx *c, const jv *v)
{
    jv k = *v;
    if (c->by_value && k.t == JV_LIST && k.n == 2) k = k.a[1];
    else if (c->attr) k = attr_path(c->r, c->at, v, c->attr);
    if (c->ci && k.t == JV_STR) k = str_case(c->r, &k, CASE_LOWER);
    return k;
}

static void msort(const sortctx *c, jv *a, jv *keys, size_t n, jv *tmp, jv *tmpk)
{
    if (n < 2) return;
    size_t h = n / 2;
    msort(c, a, keys, h, tmp, tmpk);
    msort(c, a + h, keys + h, n - h, tmp, tmpk);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        jcharge(c->r, 1);
        if (jv_cmp(c->r, c->at, &keys[j], &keys[i], 0) < 0) { tmp[k] = a[j]; tmpk[k++] = keys[j++]; }
        else { tmp[k] = a[i]; tmpk[k++] = keys[i++]; }
    }
    while (i < h) { tmp[k] = a[i]; tmpk[k++] = keys[i++]; }
    while (j < n) { tmp[k] = a[j]; tmpk[k++] = keys[j++]; }
    memcpy(a, tmp, n * sizeof *a);
    memcpy(keys, tmpk, n * sizeof *keys);
}

static jv sorted(jr *r, const jnode *at, const jv *seq, const sortctx *c, bool reverse)
{
    jv items = jv_iter(r, at, seq);
    size_t n = items.n;
    jv *a, *keys = ja_alloc(r->ar, (n + 1) * sizeof *keys);
    jv out = mk_list(r, n, &a);
    for (size_t i = 0; i < n; i++) {
        a[i] = items.a[reverse ? n - 1 - i : i];
        keys[i] = sort_key(c, &a[i]);
    }
    jv *tmp = ja_alloc(r->ar, (n + 1) * sizeof *tmp), *tmpk = ja_alloc(r->ar, (n + 1) * sizeof *tmpk);
    msort(c, a, keys, n, tmp, tmpk);
    if (reverse)   /* stable descending: reversed input, ascending sort, reversed output */
        for (size_t i = 0; i < n / 2; i++) { jv t = a[i]; a[i] = a[n - 1 - i]; a[n - 1 - i] = t; }
    return out;
}

/* ====================================================================
 * Filters
 * ==================================================================== */

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE,
    F_FIRST, F_FLOAT, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST,
    F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND,
    F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM,
    F_UNIQUE, F_UPPER, F_WORDCOUNT, F_COUNT_
};
static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "first", "float", "format", "indent", "int", "items", "join", "last", "length", "list",
    "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round",
    "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
    "unique", "upper", "wordcount",
};

int jinja_filter_id(const char *name, size_t n)
{
    for (int i = 0; i < F_COUNT_; i++)
        if (strlen(FILTERS[i]) == n && !memcmp(FILTERS[i], name, n)) return i;
    return -1;
}

/* environment.getitem along a dotted path ("a.b.0") */
static jv attr_path(jr *r, const jnode *at, const jv *item, const jv *attr)
{
    if (attr->t == JV_INT) return jv_getitem(r, at, item, attr);
    if (attr->t != JV_STR) jfail(r, at, "attribute must be a string");
    jv cur = *item;
    size_t i = 0;
    for (;;) {
        const char *dot = memchr(attr->s + i, '.', attr->n - i);
        size_t e = dot ? (size_t)(dot - attr->s) : attr->n;
        jv part = jv_strn(attr->s + i, e - i);
        bool digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++) if (part.s[k] < '0' || part.s[k] > '9') digits = false;
        if (digits && part.n < 18) {
            jv idx = jv_int(strtoll(ja_strndup(r->ar, part.s, part.n), NULL, 10));
            cur = jv_getitem(r, at, &cur, &idx);
        } else {
            cur = jv_getitem(r, at, &cur, &part);
        }
        if (!dot) return cur;
        i = e + 1;
    }
}

static bool len_of(jr *r, const jnode *at, const jv *v, size_t *n)
{
    switch (v->t) {
    case JV_STR: *n = utf8_count(v->s, v->n); jcharge(r, v->n / 64); return true;
    case JV_LIST:
        if (v->flag & JL_GEN) jfail(r, at, "object of type 'generator' has no len()");
        *n = v->n;
        return true;
    case JV_DICT: *n = v->n; return true;
    case JV_UNDEF: *n = 0; return true;
    default: jfail(r, at, "object of type '%s' has no len()", jv_typename(v));
    }
}

/* select/reject/selectattr/rejectattr: `attr` NULL for the item itself */
static jv select_items(jr *r, const jnode *at, const jv *in, const jargs *a, bool with_attr, bool want)
{
    jv items = jv_iter(r, at, in);
    size_t base = with_attr ? 1 : 0;
    const jv *attr = with_attr ? argp(a, 0, NULL) : NULL;
    if (with_attr && !attr) jfail(r, at, "selectattr/rejectattr need an attribute name");
    const jv *tname = argp(a, base, NULL);
    int tid = -1;
    if (tname) {
        need_str(r, at, tname, "test name");
        tid = jinja_test_id(tname->s, tname->n);
        if (tid < 0) jfail(r, at, "no test named '%.*s'", (int)tname->n, tname->s);
    }
    jargs ta = {0};
    if (a->npos > base + 1) { ta.pos = a->pos + base + 1; ta.npos = a->npos - base - 1; }
    jv *out;
    jv res = mk_list(r, items.n, &out);
    size_t k = 0;
    for (size_t i = 0; i < items.n; i++) {
        jcharge(r, 1);
        jv v = attr ? attr_path(r, at, &items.a[i], attr) : items.a[i];
        bool t = tid >= 0 ? japply_test(r, at, tid, &v, &ta) : jv_truthy(&v);
        if (t == want) out[k++] = items.a[i];
    }
    res.n = k;
    res.flag = JL_GEN;
    return res;
}

static jv f_map(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jv items = jv_iter(r, at, in);
    jv *out;
    jv res = mk_list(r, items.n, &out);
    res.flag = JL_GEN;
    const jv *attr = argp(a, 99, "attribute");
    if (attr) {
        const jv *dflt = argp(a, 99, "default");
        for (size_t i = 0; i < items.n; i++) {
            jcharge(r, 1);
            out[i] = attr_path(r, at, &items.a[i], attr);
            if (out[i].t == JV_UNDEF && dflt) out[i] = *dflt;
        }
        return res;
    }
    const jv *fname = argp(a, 0, NULL);
    if (!fname) return res;   /* map() with nothing: items unchanged */
    need_str(r, at, fname, "filter name");
    int fid = jinja_filter_id(fname->s, fname->n);
    if (fid < 0) jfail(r, at, "no filter named '%.*s'", (int)fname->n, fname->s);
    jargs fa = *a;
    fa.pos = a->pos + 1;
    fa.npos = a->npos - 1;
    for (size_t i = 0; i < items.n; i++) {
        jcharge(r, 1);
        out[i] = japply_filter(r, at, fid, &items.a[i], &fa);
    }
    return res;
}

static jv to_int(jr *r, const jv *v, const jv *dflt, int64_t base)
{
    switch (v->t) {
    case JV_INT: return *v;
    case JV_BOOL: return jv_int(v->b);
    case JV_FLOAT:
        if (isfinite(v->f) && fabs(v->f) < 9.2e18) return jv_int((int64_t)v->f);
        return *dflt;
    case JV_STR: {
        jv s = str_strip(r, v, NULL, true, true);
        char buf[80];
        size_t k = 0;
        for (size_t i = 0; i < s.n && k < sizeof buf - 1; i++)
            if (s.s[i] != '_') buf[k++] = s.s[i];
        buf[k] = 0;
        if (k == 0 || s.n >= sizeof buf - 1) return *dflt;
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, (int)base);
        if (!*end && !errno) return jv_int(x);
        double d = strtod(buf, &end);
        if (!*end && isfinite(d) && fabs(d) < 9.2e18 && base == 10) return jv_int((int64_t)d);
        return *dflt;
    }
    default:
        return *dflt;
    }
}

static jv to_float(jr *r, const jv *v, const jv *dflt)
{
    switch (v->t) {
    case JV_INT: return jv_float((double)v->i);
    case JV_BOOL: return jv_float(v->b);
    case JV_FLOAT: return *v;
    case JV_STR: {
        jv s = str_strip(r, v, NULL, true, true);
        char buf[80];
        if (!s.n || s.n >= sizeof buf) return *dflt;
        memcpy(buf, s.s, s.n);
        buf[s.n] = 0;
        char *end;
        double d = strtod(buf, &end);
        if (*end) return *dflt;
        return jv_float(d);
    }
    default:
        return *dflt;
    }
}

static jv f_indent(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jv s = jv_tostr(r, in);
    const jv *w = argp(a, 0, "width");
    const jv *first = argp(a, 1, "first"), *blank = argp(a, 2, "blank");
    jv ind;
    if (w && w->t == JV_STR) {
        ind = *w;
    } else {
        int64_t n = w ? need_int(r, at, w, "width") : 4;
        if (n < 0) n = 0;
        if (n > 10000) jfail(r, at, "indent width too large");
        char *sp = ja_alloc(r->ar, (size_t)n + 1);
        memset(sp, ' ', (size_t)n);
        ind = jv_strn(sp, (size_t)n);
    }
    /* s + "\n", split into lines (as str.splitlines, newline kinds \n \r\n \r) */
    jv t = jstr_cat(r, s.s, s.n, "\n", 1);
    jbuf b;
    jbuf_init(r, &b);
    bool bl = blank && jv_truthy(blank);
    size_t i = 0, line = 0;
    while (i < t.n) {
        size_t e = i;
        while (e < t.n && t.s[e] != '\n' && t.s[e] != '\r' && t.s[e] != '\v' && t.s[e] != '\f') e++;
        size_t nx = e + 1;
        if (e < t.n && t.s[e] == '\r' && nx < t.n && t.s[nx] == '\n') nx++;
        if (line > 0) {
            jb_putc(&b, '\n');
            if (bl || e > i) jb_put(&b, ind.s, ind.n);
        }
        jb_put(&b, t.s + i, e - i);
        line++;
        i = nx;
    }
    jv rv = jbuf_str(&b);
    if (first && jv_truthy(first)) rv = jstr_cat(r, ind.s, ind.n, rv.s, rv.n);
    return rv;
}

static jv py_round(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    const jv *pv = argp(a, 0, "precision"), *mv = argp(a, 1, "method");
    int64_t prec = pv ? need_int(r, at, pv, "precision") : 0;
    if (in->t != JV_INT && in->t != JV_FLOAT && in->t != JV_BOOL) {
        if (in->t == JV_UNDEF) jfail_undef(r, at, in);
        jfail(r, at, "type %s doesn't define __round__ method", jv_typename(in));
    }
    double x = in->t == JV_FLOAT ? in->f : (double)(in->t == JV_INT ? in->i : in->b);
    const char *method = "common";
    if (mv) method = need_str(r, at, mv, "method")->s;
    if (mv && mv->n == 5 && !memcmp(mv->s, "floor", 5)) {
        double m = pow(10, (double)prec);
        return jv_float(floor(x * m) / m);
    }
    if (mv && mv->n == 4 && !memcmp(mv->s, "ceil", 4)) {
        double m = pow(10, (double)prec);
        return jv_float(ceil(x * m) / m);
    }
    if (mv && !(mv->n == 6 && !memcmp(method, "common", 6)))
        jfail(r, at, "method must be common, ceil or floor");
    if (in->t != JV_FLOAT && prec >= 0) return jv_int(in->t == JV_INT ? in->i : in->b);
    if (!isfinite(x)) return jv_float(x);
    if (prec == 0) return jv_float(nearbyint(x));
    if (prec > 0 && prec < 300) {
        /* glibc prints the exact binary value rounded half-even, as Python's round */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        return jv_float(strtod(buf, NULL));
    }
    double m = pow(10, (double)-prec);
    return jv_float(nearbyint(x / m) * m);
}

static jv f_join(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jv items = jv_iter(r, at, in);
    const jv *sep = argp(a, 0, "d"), *attr = argp(a, 1, "attribute");
    jbuf b;
    jbuf_init(r, &b);
    for (size_t i = 0; i < items.n; i++) {
        jcharge(r, 1);
        if (i && sep) {
            jv s = jv_tostr(r, sep);
            jb_put(&b, s.s, s.n);
        }
        jv v = attr ? attr_path(r, at, &items.a[i], attr) : items.a[i];
        jv_write(r, &b, &v, false, 0);
    }
    return jbuf_str(&b);
}

static jv f_unique(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jv items = jv_iter(r, at, in);
    const jv *cs = argp(a, 0, "case_sensitive"), *attr = argp(a, 1, "attribute");
    sortctx c = {r, at, attr, !(cs && jv_truthy(cs)), false};
    jv *out, *keys = ja_alloc(r->ar, (items.n + 1) * sizeof *keys);
    jv res = mk_list(r, items.n, &out);
    size_t k = 0;
    for (size_t i = 0; i < items.n; i++) {
        jv key = sort_key(&c, &items.a[i]);
        if (key.t == JV_LIST && !(key.flag & JL_TUPLE)) jfail(r, at, "unhashable type: 'list'");
        if (key.t == JV_DICT) jfail(r, at, "unhashable type: 'dict'");
        jcharge(r, 1 + k);
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++) seen = jv_eq(r, &keys[j], &key, 0);
        if (!seen) { keys[k] = key; out[k++] = items.a[i]; }
    }
    res.n = k;
    res.flag = JL_GEN;
    return res;
}

static jv f_minmax(jr *r, const jnode *at, const jv *in, const jargs *a, bool max)
{
    jv items = jv_iter(r, at, in);
    const jv *cs = argp(a, 0, "case_sensitive"), *attr = argp(a, 1, "attribute");
    sortctx c = {r, at, attr, !(cs && jv_truthy(cs)), false};
    if (!items.n) return jv_undef();
    size_t best = 0;
    jv bk = sort_key(&c, &items.a[0]);
    for (size_t i = 1; i < items.n; i++) {
        jcharge(r, 1);
        jv k = sort_key(&c, &items.a[i]);
        int cmp = jv_cmp(r, at, &k, &bk, 0);
        if (max ? cmp > 0 : cmp < 0) { best = i; bk = k; }
    }
    return items.a[best];
}

static jv f_escape(jr *r, const jv *in)
{
    jv s = jv_tostr(r, in);
    jbuf b;
    jbuf_init(r, &b);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.s[i]) {
        case '&': jb_put(&b, "&amp;", 5); break;
        case '<': jb_put(&b, "&lt;", 4); break;
        case '>': jb_put(&b, "&gt;", 4); break;
        case '"': jb_put(&b, "&#34;", 5); break;
        case '\'': jb_put(&b, "&#39;", 5); break;
        default: jb_putc(&b, s.s[i]);
        }
    }
    return jbuf_str(&b);
}

static jv f_abs(jr *r, const jnode *at, const jv *in)
{
    if (in->t == JV_INT) {
        if (in->i == INT64_MIN) jfail(r, at, "integer overflow");
        return jv_int(in->i < 0 ? -in->i : in->i);
    }
    if (in->t == JV_BOOL) return jv_int(in->b);
    if (in->t == JV_FLOAT) return jv_float(fabs(in->f));
    if (in->t == JV_UNDEF) jfail_undef(r, at, in);
    jfail(r, at, "bad operand type for abs(): '%s'", jv_typename(in));
}

static jv f_center(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jv s = jv_tostr(r, in);
    const jv *w = argp(a, 0, "width");
    int64_t width = w ? need_int(r, at, w, "width") : 80;
    size_t len = utf8_count(s.s, s.n);
    if (width > 100000) jfail(r, at, "width too large");
    if (width <= (int64_t)len) return s;
    size_t pad = (size_t)width - len, left = pad / 2 + (pad & (size_t)width & 1);
    jbuf b;
    jbuf_init(r, &b);
    for (size_t k = 0; k < left; k++) jb_putc(&b, ' ');
    jb_put(&b, s.s, s.n);
    for (size_t k = left; k < pad; k++) jb_putc(&b, ' ');
    return jbuf_str(&b);
}

static jv f_dictsort(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    if (in->t != JV_DICT) jfail(r, at, "dictsort needs a mapping");
    const jv *cs = argp(a, 0, "case_sensitive"), *by = argp(a, 1, "by"), *rev = argp(a, 2, "reverse");
    jv *pairs;
    jv lst = mk_list(r, in->n, &pairs);
    for (size_t i = 0; i < in->n; i++) {
        jv *t;
        pairs[i] = mk_list(r, 2, &t);
        pairs[i].flag = JL_TUPLE;
        t[0] = in->d[i].k;
        t[1] = in->d[i].v;
    }
    bool by_value = by && by->t == JV_STR && by->n == 5 && !memcmp(by->s, "value", 5);
    jv zero = jv_int(0);
    sortctx c = {r, at, by_value ? NULL : &zero, !(cs && jv_truthy(cs)), by_value};
    return sorted(r, at, &lst, &c, rev && jv_truthy(rev));
}

static jv f_items(jr *r, const jnode *at, const jv *in)
{
    jv *out;
    if (in->t == JV_UNDEF) { jv e = mk_list(r, 0, &out); e.flag = JL_GEN; return e; }
    if (in->t != JV_DICT) jfail(r, at, "Can only get item pairs from a mapping.");
    jv res = mk_list(r, in->n, &out);
    for (size_t i = 0; i < in->n; i++) {
        jv *t;
        out[i] = mk_list(r, 2, &t);
        out[i].flag = JL_TUPLE;
        t[0] = in->d[i].k;
        t[1] = in->d[i].v;
    }
    res.flag = JL_GEN;
    return res;
}

static jv f_reverse(jr *r, const jnode *at, const jv *in)
{
    if (in->t == JV_STR) {
        jv m1 = jv_int(-1), none = jv_none();
        return jv_slice(r, at, in, &none, &none, &m1);
    }
    jv items = jv_iter(r, at, in);
    jv *out;
    jv res = mk_list(r, items.n, &out);
    for (size_t i = 0; i < items.n; i++) out[i] = items.a[items.n - 1 - i];
    res.flag = JL_GEN;
    return res;
}

static jv f_sum(jr *r, const jnode *at, const jv *in, const jargs *a)
{
    jv items = jv_iter(r, at, in);
    const jv *attr = argp(a, 0, "attribute"), *st = argp(a, 1, "start");
    jv acc = st ? *st : jv_int(0);
    for (size_t i = 0; i < items.n; i++) {
        jcharge(r, 1);
        jv v = attr ? attr_path(r, at, &items.a[i], attr) : items.a[i];
        acc = jv_binop(r, at, JOP_ADD, &acc, &v);
    }
    return acc;
}

static jv f_wordcount(jr *r, const jv *in)
{
    jv s = jv_tostr(r, in);
    size_t n = 0;
    bool inw = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.s[i];
        bool w = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        if (w && !inw) n++;
        inw = w;
    }
    return jv_int((int64_t)n);
}

jv japply_filter(jr *r, const jnode *at, int id, const jv *in, const jargs *a)
{
    jv s;
    switch (id) {
    case F_ABS:
        return f_abs(r, at, in);
    case F_ATTR: {
        const jv *n = need_str(r, at, argp(a, 0, "name"), "attribute name");
        return jv_getattr(r, at, in, n->s, n->n);
    }
    case F_CAPITALIZE: s = jv_tostr(r, in); return str_case(r, &s, CASE_CAPITALIZE);
    case F_TITLE: s = jv_tostr(r, in); return str_case(r, &s, CASE_JTITLE);
    case F_UPPER: s = jv_tostr(r, in); return str_case(r, &s, CASE_UPPER);
    case F_LOWER: s = jv_tostr(r, in); return str_case(r, &s, CASE_LOWER);
    case F_CENTER:
        return f_center(r, at, in, a);
    case F_COUNT:
    case F_LENGTH: {
        size_t n;
        len_of(r, at, in, &n);
        return jv_int((int64_t)n);
    }
    case F_D:
    case F_DEFAULT: {
        const jv *dv = argp(a, 0, "default_value"), *bo = argp(a, 1, "boolean");
        bool use = in->t == JV_UNDEF || (bo && jv_truthy(bo) && !jv_truthy(in));
        if (!use) return *in;
        return dv ? *dv : jv_strn("", 0);
    }
    case F_DICTSORT:
        return f_dictsort(r, at, in, a);
    case F_E:
    case F_ESCAPE:
        return f_escape(r, in);
    case F_FIRST: {
        if (in->t == JV_UNDEF) return jv_undef();
        jv items = jv_iter(r, at, in);
        return items.n ? items.a[0] : jv_undef();
    }
    case F_LAST: {
        if (in->t == JV_LIST && (in->flag & JL_GEN)) jfail(r, at, "'generator' object is not reversible");
        if (in->t == JV_UNDEF) return jv_undef();
        jv items = jv_iter(r, at, in);
        return items.n ? items.a[items.n - 1] : jv_undef();
    }
    case F_FLOAT: {
        jv zero = jv_float(0);
        const jv *d = argp(a, 0, "default");
        return to_float(r, in, d ? d : &zero);
    }
    case F_INT: {
        jv zero = jv_int(0);
        const jv *d = argp(a, 0, "default"), *b = argp(a, 1, "base");
        int64_t base = b ? need_int(r, at, b, "base") : 10;
        if (base < 2 || base > 36) base = 10;
        return to_int(r, in, d ? d : &zero, base);
    }
    case F_FORMAT: {
        s = jv_tostr(r, in);
        jv args = jv_list(a->pos, a->npos);
        args.flag = JL_TUPLE;
        return jv_percent_format(r, at, &s, &args);
    }
    case F_INDENT:
        return f_indent(r, at, in, a);
    case F_ITEMS:
        return f_items(r, at, in);
    case F_JOIN:
        return f_join(r, at, in, a);
    case F_LIST: {
        jv items = jv_iter(r, at, in);
        jv *out;
        jv res = mk_list(r, items.n, &out);
        if (items.n) memcpy(out, items.a, items.n * sizeof *out);
        jcharge(r, items.n / 8);
        return res;
    }
    case F_MAP:
        return f_map(r, at, in, a);
    case F_MAX:
    case F_MIN:
        return f_minmax(r, at, in, a, id == F_MAX);
    case F_REJECT: return select_items(r, at, in, a, false, false);
    case F_SELECT: return select_items(r, at, in, a, false, true);
    case F_REJECTATTR: return select_items(r, at, in, a, true, false);
    case F_SELECTATTR: return select_items(r, at, in, a, true, true);
    case F_REPLACE: {
        s = jv_tostr(r, in);
        const jv *c = argp(a, 2, "count");
        int64_t count = c && c->t != JV_NONE ? need_int(r, at, c, "count") : -1;
        return str_replace(r, at, &s, argp(a, 0, "old"), argp(a, 1, "new"), count);
    }
    case F_REVERSE:
        return f_reverse(r, at, in);
    case F_ROUND:
        return py_round(r, at, in, a);
    case F_SAFE:
        return *in;
    case F_SORT: {
        const jv *rev = argp(a, 0, "reverse"), *cs = argp(a, 1, "case_sensitive"), *attr = argp(a, 2, "attribute");
        sortctx c = {r, at, attr, !(cs && jv_truthy(cs)), false};
        return sorted(r, at, in, &c, rev && jv_truthy(rev));
    }
    case F_STRING:
        return jv_tostr(r, in);
    case F_SUM:
        return f_sum(r, at, in, a);
    case F_TOJSON:
        return f_tojson(r, at, in, a);
    case F_TRIM:
        s = jv_tostr(r, in);
        return str_strip(r, &s, argp(a, 0, "chars"), true, true);
    case F_UNIQUE:
        return f_unique(r, at, in, a);
    case F_WORDCOUNT:
        return f_wordcount(r, in);
    }
    jfail(r, at, "BUG: filter %d", id);
}

/* ====================================================================
 * Tests
 * ==================================================================== */

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_STRING, T_NUMBER, T_INTEGER, T_FLOAT, T_MAPPING,
    T_ITERABLE, T_SEQUENCE, T_BOOLEAN, T_TRUE, T_FALSE, T_CALLABLE, T_ODD, T_EVEN,
    T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_EQSYM, T_NE, T_NESYM, T_LT, T_LESSTHAN, T_LTSYM,
    T_LE, T_LESYM, T_GT, T_GREATERTHAN, T_GTSYM, T_GE, T_GESYM, T_IN, T_SAMEAS, T_LOWER,
    T_UPPER, T_ESCAPED, T_COUNT_
};
static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
    "iterable", "sequence", "boolean", "true", "false", "callable", "odd", "even",
    "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<",
    "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas", "lower",
    "upper", "escaped",
};

int jinja_test_id(const char *name, size_t n)
{
    for (int i = 0; i < T_COUNT_; i++)
        if (strlen(TESTS[i]) == n && !memcmp(TESTS[i], name, n)) return i;
    return -1;
}

bool japply_test(jr *r, const jnode *at, int id, const jv *v, const jargs *a)
{
    const jv *x = argp(a, 0, NULL);
    jv none = jv_none();
    if (!x) x = &none;
    switch (id) {
    case T_DEFINED: return v->t != JV_UNDEF;
    case T_UNDEFINED: return v->t == JV_UNDEF;
    case T_NONE: return v->t == JV_NONE;
    case T_STRING: return v->t == JV_STR;
    case T_NUMBER: return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
    case T_INTEGER: return v->t == JV_INT;
    case T_FLOAT: return v->t == JV_FLOAT;
    case T_MAPPING: return v->t == JV_DICT;
    case T_ITERABLE: return v->t == JV_STR || v->t == JV_LIST || v->t == JV_DICT || v->t == JV_UNDEF;
    case T_SEQUENCE: return v->t == JV_STR || (v->t == JV_LIST && !(v->flag & JL_GEN)) || v->t == JV_DICT || v->t == JV_UNDEF;
    case T_BOOLEAN: return v->t == JV_BOOL;
    case T_TRUE: return v->t == JV_BOOL && v->b;
    case T_FALSE: return v->t == JV_BOOL && !v->b;
    case T_CALLABLE: return v->t == JV_MACRO || v->t == JV_FUNC;
    case T_ODD:
    case T_EVEN: {
        if (v->t != JV_INT && v->t != JV_BOOL) {
            if (v->t == JV_UNDEF) jfail_undef(r, at, v);
            jfail(r, at, "odd/even need an integer, not %s", jv_typename(v));
        }
        int64_t i = v->t == JV_INT ? v->i : v->b;
        return (i % 2 != 0) == (id == T_ODD);
    }
    case T_DIVISIBLEBY: {
        jv m = jv_binop(r, at, JOP_MOD, v, x);
        return !jv_truthy(&m);
    }
    case T_EQ: case T_EQUALTO: case T_EQSYM: return jv_eq(r, v, x, 0);
    case T_NE: case T_NESYM: return !jv_eq(r, v, x, 0);
    case T_LT: case T_LESSTHAN: case T_LTSYM: return jv_cmp(r, at, v, x, 0) < 0;
    case T_LE: case T_LESYM: return jv_cmp(r, at, v, x, 0) <= 0;
    case T_GT: case T_GREATERTHAN: case T_GTSYM: return jv_cmp(r, at, v, x, 0) > 0;
    case T_GE: case T_GESYM: return jv_cmp(r, at, v, x, 0) >= 0;
    case T_IN: {
        if (x->t == JV_STR) {
            if (v->t != JV_STR) jfail(r, at, "'in <string>' requires string as left operand, not %s", jv_typename(v));
            return v->n == 0 || memmem(x->s, x->n, v->s, v->n) != NULL;
        }
        if (x->t == JV_DICT) return jdict_get(r, x, v) != NULL;
        if (x->t == JV_LIST) {
            jcharge(r, x->n);
            for (size_t i = 0; i < x->n; i++)
                if (jv_eq(r, v, &x->a[i], 0)) return true;
            return false;
        }
        if (x->t == JV_UNDEF) return false;
        jfail(r, at, "argument of type '%s' is not iterable", jv_typename(x));
    }
    case T_SAMEAS:
        if (v->t != x->t) return false;
        switch (v->t) {
        case JV_NONE: case JV_UNDEF: return true;
        case JV_BOOL: return v->b == x->b;
        case JV_INT: return v->i == x->i && v->i >= -5 && v->i <= 256;   /* CPython's small ints */
        case JV_STR: return v->n == x->n && !memcmp(v->s, x->s, v->n);   /* interned literals */
        case JV_LIST: return v->a == x->a && v->n == x->n;
        case JV_DICT: return v->d == x->d;
        case JV_NS: return v->ns == x->ns;
        default: return jv_eq(r, v, x, 0);
        }
    case T_LOWER:
    case T_UPPER: {
        jv s = jv_tostr(r, v);
        jv c = str_case(r, &s, id == T_LOWER ? CASE_LOWER : CASE_UPPER);
        bool any_cased = false;
        size_t i = 0;
        while (i < s.n) if (is_cased(utf8_next(s.s, s.n, &i))) { any_cased = true; break; }
        return any_cased && c.n == s.n && !memcmp(c.s, s.s, s.n);
    }
    case T_ESCAPED:
        return false;
    }
    jfail(r, at, "BUG: test %d", id);
}

/* ====================================================================
 * Methods
 * ==================================================================== */

#define NAME_IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))

static bool str_method(jr *r, const jnode *at, const jv *s, const char *name, size_t n,
                       const jargs *a, jv *res)
{
    if (NAME_IS("strip") || NAME_IS("lstrip") || NAME_IS("rstrip")) {
        nargs_max(r, at, name, a, 1);
        const jv *ch = argp(a, 0, NULL);
        if (ch && ch->t != JV_NONE) need_str(r, at, ch, "strip arg");
        *res = str_strip(r, s, ch, name[0] != 'r', name[0] != 'l');
    } else if (NAME_IS("split")) {
        const jv *sep = argp(a, 0, "sep"), *mx = argp(a, 1, "maxsplit");
        *res = str_split(r, at, s, sep, mx ? need_int(r, at, mx, "maxsplit") : -1);
    } else if (NAME_IS("startswith") || NAME_IS("endswith")) {
        const jv *p = argp(a, 0, NULL);
        if (!p) jfail(r, at, "%s takes at least 1 argument (0 given)", name);
        *res = jv_bool(str_startswith(r, at, s, p, name[0] == 'e'));
    } else if (NAME_IS("upper")) {
        *res = str_case(r, s, CASE_UPPER);
    } else if (NAME_IS("lower")) {
        *res = str_case(r, s, CASE_LOWER);
    } else if (NAME_IS("title")) {
        *res = str_case(r, s, CASE_TITLE);
    } else if (NAME_IS("capitalize")) {
        *res = str_case(r, s, CASE_CAPITALIZE);
    } else if (NAME_IS("replace")) {
        const jv *c = argp(a, 2, "count");
        *res = str_replace(r, at, s, argp(a, 0, NULL), argp(a, 1, NULL), c ? need_int(r, at, c, "count") : -1);
    } else if (NAME_IS("format")) {
        *res = str_format(r, at, s, a);
    } else if (NAME_IS("join")) {
        const jv *it = argp(a, 0, NULL);
        if (!it) jfail(r, at, "join() takes exactly one argument (0 given)");
        jv items = jv_iter(r, at, it);
        jbuf b;
        jbuf_init(r, &b);
        for (size_t i = 0; i < items.n; i++) {
            jcharge(r, 1);
            if (items.a[i].t != JV_STR)
                jfail(r, at, "sequence item %zu: expected str instance, %s found", i, jv_typename(&items.a[i]));
            if (i) jb_put(&b, s->s, s->n);
            jb_put(&b, items.a[i].s, items.a[i].n);
        }
        *res = jbuf_str(&b);
    } else if (NAME_IS("find") || NAME_IS("count") || NAME_IS("index") || NAME_IS("rfind")) {
        const jv *sub = need_str(r, at, argp(a, 0, NULL), "substring");
        jcharge(r, 1 + s->n / 64);
        if (NAME_IS("count")) {
            int64_t c = 0;
            if (!sub->n) c = (int64_t)utf8_count(s->s, s->n) + 1;
            else for (size_t i = 0; i + sub->n <= s->n;) {
                const char *h = memmem(s->s + i, s->n - i, sub->s, sub->n);
                if (!h) break;
                c++;
                i = (size_t)(h - s->s) + sub->n;
            }
            *res = jv_int(c);
        } else {
            const char *h = NULL;
            if (NAME_IS("rfind")) {
                for (size_t i = s->n + 1; i-- > 0;)
                    if (i + sub->n <= s->n && !memcmp(s->s + i, sub->s, sub->n)) { h = s->s + i; break; }
            } else {
                h = sub->n ? memmem(s->s, s->n, sub->s, sub->n) : s->s;
            }
            if (!h && NAME_IS("index")) jfail(r, at, "substring not found");
            *res = jv_int(h ? (int64_t)utf8_count(s->s, (size_t)(h - s->s)) : -1);
        }
    } else if (NAME_IS("isdigit") || NAME_IS("isalpha") || NAME_IS("isalnum") || NAME_IS("isspace") ||
               NAME_IS("islower") || NAME_IS("isupper")) {
        bool ok = s->n > 0, cased = false;
        size_t i = 0;
        while (i < s->n && ok) {
            uint32_t cp = utf8_next(s->s, s->n, &i);
            const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
            bool dig = p->category == UTF8PROC_CATEGORY_ND;
            bool alpha = p->category >= UTF8PROC_CATEGORY_LU && p->category <= UTF8PROC_CATEGORY_LO;
            if (NAME_IS("isdigit")) ok = dig;
            else if (NAME_IS("isalpha")) ok = alpha;
            else if (NAME_IS("isalnum")) ok = alpha || dig || p->category == UTF8PROC_CATEGORY_NL || p->category == UTF8PROC_CATEGORY_NO;
            else if (NAME_IS("isspace")) ok = py_isspace(cp);
            else if (NAME_IS("islower")) { if (p->category == UTF8PROC_CATEGORY_LU || p->category == UTF8PROC_CATEGORY_LT) ok = false; if (p->category == UTF8PROC_CATEGORY_LL) cased = true; }
            else { if (p->category == UTF8PROC_CATEGORY_LL || p->category == UTF8PROC_CATEGORY_LT) ok = false; if (p->category == UTF8PROC_CATEGORY_LU) cased = true; }
        }
        if (NAME_IS("islower") || NAME_IS("isupper")) ok = ok && cased;
        *res = jv_bool(ok);
    } else if (NAME_IS("splitlines")) {
        jv items = str_split(r, at, &(jv){.t = JV_STR, .s = s->s, .n = s->n}, &(jv){.t = JV_STR, .s = "\n", .n = 1}, -1);
        if (items.n && items.a[items.n - 1].n == 0) items.n--;
        for (size_t i = 0; i < items.n; i++)
            if (items.a[i].n && items.a[i].s[items.a[i].n - 1] == '\r') items.a[i].n--;
        *res = items;
    } else {
        return false;
    }
    return true;
}

static bool dict_method(jr *r, const jnode *at, const jv *d, const char *name, size_t n,
                        const jargs *a, jv *res)
{
    if (NAME_IS("items") || NAME_IS("keys") || NAME_IS("values")) {
        jv *out;
        *res = mk_list(r, d->n, &out);
        for (size_t i = 0; i < d->n; i++) {
            if (name[0] == 'i') {
                jv *t;
                out[i] = mk_list(r, 2, &t);
                out[i].flag = JL_TUPLE;
                t[0] = d->d[i].k;
                t[1] = d->d[i].v;
            } else {
                out[i] = name[0] == 'k' ? d->d[i].k : d->d[i].v;
            }
        }
        res->flag = JL_VIEW;
        jcharge(r, d->n / 4);
        return true;
    }
    if (NAME_IS("get")) {
        const jv *k = argp(a, 0, NULL), *dv = argp(a, 1, NULL);
        if (!k) jfail(r, at, "get expected at least 1 argument, got 0");
        const jv *v = jdict_get(r, d, k);
        *res = v ? *v : dv ? *dv : jv_none();
        return true;
    }
    if (NAME_IS("copy")) {
        jkv *nd = ja_alloc(r->ar, (d->n + 1) * sizeof *nd);
        if (d->n) memcpy(nd, d->d, d->n * sizeof *nd);
        *res = jv_dict(nd, d->n);
        return true;
    }
    if (NAME_IS("update") || NAME_IS("pop") || NAME_IS("popitem") || NAME_IS("setdefault") || NAME_IS("clear"))
        jfail(r, at, "access to attribute '%.*s' of 'dict' object is unsafe.", (int)n, name);
    return false;
}

static bool list_method(jr *r, const jnode *at, const jv *l, const char *name, size_t n,
                        const jargs *a, jv *res)
{
    if (NAME_IS("append") || NAME_IS("extend") || NAME_IS("insert") || NAME_IS("pop") ||
        NAME_IS("remove") || NAME_IS("clear") || NAME_IS("sort") || NAME_IS("reverse"))
        jfail(r, at, "access to attribute '%.*s' of '%s' object is unsafe.", (int)n, name, jv_typename(l));
    if (l->flag & (JL_GEN | JL_VIEW)) return false;
    if (NAME_IS("index") || NAME_IS("count")) {
        const jv *x = argp(a, 0, NULL);
        if (!x) jfail(r, at, "%.*s() takes exactly one argument (0 given)", (int)n, name);
        jcharge(r, l->n);
        int64_t c = 0;
        for (size_t i = 0; i < l->n; i++)
            if (jv_eq(r, &l->a[i], x, 0)) {
                if (name[0] == 'i') { *res = jv_int((int64_t)i); return true; }
                c++;
            }
        if (name[0] == 'i') jfail(r, at, "value is not in list");
        *res = jv_int(c);
        return true;
    }
    return false;
}

bool jcall_method(jr *r, const jnode *at, const jv *obj, const char *name, size_t n,
                  const jargs *a, jv *res)
{
    switch (obj->t) {
    case JV_STR: return str_method(r, at, obj, name, n, a, res);
    case JV_DICT: return dict_method(r, at, obj, name, n, a, res);
    case JV_LIST: return list_method(r, at, obj, name, n, a, res);
    case JV_LOOP:
        if (NAME_IS("cycle")) {
            if (!a->npos) jfail(r, at, "no items for cycling given");
            *res = a->pos[obj->loop->i % a->npos];
            return true;
        }
        return false;
    default:
        return false;
    }
}

/* ====================================================================
 * Globals
 * ==================================================================== */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_COUNT_ };

#define MAX_RANGE 100000   /* jinja2 sandbox's MAX_RANGE */

static const char *const MONTHS[] = {"January", "February", "March", "April", "May", "June", "July",
                                     "August", "September", "October", "November", "December"};
static const char *const DAYS[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};

/* strftime in the C locale, whatever the process locale is */
static jv py_strftime(jr *r, const jnode *at, const jv *fmt)
{
    struct tm tm;
    time_t t;
    if (r->now == INT64_MIN) {
        t = time(NULL);
        localtime_r(&t, &tm);
    } else {
        t = (time_t)r->now;
        gmtime_r(&t, &tm);
    }
    jbuf b;
    jbuf_init(r, &b);
    for (size_t i = 0; i < fmt->n; i++) {
        char c = fmt->s[i];
        if (c != '%' || i + 1 >= fmt->n) { jb_putc(&b, c); continue; }
        char k = fmt->s[++i];
        switch (k) {
        case 'd': jb_printf(&b, "%02d", tm.tm_mday); break;
        case 'e': jb_printf(&b, "%2d", tm.tm_mday); break;
        case 'm': jb_printf(&b, "%02d", tm.tm_mon + 1); break;
        case 'Y': jb_printf(&b, "%d", tm.tm_year + 1900); break;
        case 'y': jb_printf(&b, "%02d", (tm.tm_year + 1900) % 100); break;
        case 'H': jb_printf(&b, "%02d", tm.tm_hour); break;
        case 'I': jb_printf(&b, "%02d", tm.tm_hour % 12 ? tm.tm_hour % 12 : 12); break;
        case 'M': jb_printf(&b, "%02d", tm.tm_min); break;
        case 'S': jb_printf(&b, "%02d", tm.tm_sec); break;
        case 'p': jb_put(&b, tm.tm_hour < 12 ? "AM" : "PM", 2); break;
        case 'j': jb_printf(&b, "%03d", tm.tm_yday + 1); break;
        case 'B': jb_printf(&b, "%s", MONTHS[tm.tm_mon]); break;
        case 'b': case 'h': jb_printf(&b, "%.3s", MONTHS[tm.tm_mon]); break;
        case 'A': jb_printf(&b, "%s", DAYS[tm.tm_wday]); break;
        case 'a': jb_printf(&b, "%.3s", DAYS[tm.tm_wday]); break;
        case 'w': jb_printf(&b, "%d", tm.tm_wday); break;
        case 'F': jb_printf(&b, "%d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday); break;
        case '%': jb_putc(&b, '%'); break;
        default: jb_putc(&b, '%'); jb_putc(&b, k); break;
        }
    }
    (void)at;
    return jbuf_str(&b);
}

jv jcall_builtin(jr *r, const jnode *at, int fn, const jargs *a)
{
    switch (fn) {
    case G_RANGE: {
        if (a->nkw) jfail(r, at, "range() takes no keyword arguments");
        if (a->npos < 1 || a->npos > 3) jfail(r, at, "range expected 1 to 3 arguments, got %zu", a->npos);
        int64_t st = 0, sp, sk = 1;
        if (a->npos == 1) sp = need_int(r, at, &a->pos[0], "range() argument");
        else {
            st = need_int(r, at, &a->pos[0], "range() argument");
            sp = need_int(r, at, &a->pos[1], "range() argument");
            if (a->npos == 3) sk = need_int(r, at, &a->pos[2], "range() argument");
        }
        if (sk == 0) jfail(r, at, "range() arg 3 must not be zero");
        double cnt = sk > 0 ? ceil(((double)sp - (double)st) / (double)sk) : ceil(((double)st - (double)sp) / (double)-sk);
        if (cnt < 0) cnt = 0;
        if (cnt > MAX_RANGE)
            jfail(r, at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
        jv *out;
        jv res = mk_list(r, (size_t)cnt, &out);
        for (size_t i = 0; i < (size_t)cnt; i++) out[i] = jv_int(st + (int64_t)i * sk);
        jcharge(r, (uint64_t)cnt / 8);
        return res;
    }
    case G_NAMESPACE:
    case G_DICT: {
        jkv *d = ja_alloc(r->ar, (a->nkw + 16) * sizeof *d);
        size_t n = 0, cap = a->nkw + 16;
        for (size_t p = 0; p < a->npos; p++) {
            if (a->pos[p].t != JV_DICT) jfail(r, at, "%s() positional arguments must be mappings", fn == G_DICT ? "dict" : "namespace");
            const jv *src = &a->pos[p];
            if (n + src->n > cap) {
                size_t nc = (n + src->n) * 2;
                jkv *nd = ja_alloc(r->ar, nc * sizeof *nd);
                memcpy(nd, d, n * sizeof *nd);
                d = nd;
                cap = nc;
            }
            for (size_t i = 0; i < src->n; i++) d[n++] = src->d[i];
        }
        for (size_t k = 0; k < a->nkw; k++) {
            jv key = jv_strn(a->kwn[k], strlen(a->kwn[k]));
            size_t m;
            for (m = 0; m < n; m++) if (jv_eq(r, &d[m].k, &key, 0)) break;
            d[m].k = key;
            d[m].v = a->kwv[k];
            if (m == n) n++;
        }
        if (fn == G_DICT) return jv_dict(d, n);
        struct jns *ns = ja_alloc(r->ar, sizeof *ns);
        ns->d = d;
        ns->n = n;
        ns->cap = cap;
        jv v = {0};
        v.t = JV_NS;
        v.ns = ns;
        return v;
    }
    case G_RAISE: {
        const jv *m = argp(a, 0, "message");
        jv s = m ? jv_tostr(r, m) : jv_strn("", 0);
        jfail(r, at, "raise_exception: %.*s", (int)(s.n > 300 ? 300 : s.n), s.s);
    }
    case G_STRFTIME: {
        const jv *f = need_str(r, at, argp(a, 0, "format"), "strftime_now format");
        return py_strftime(r, at, f);
    }
    }
    jfail(r, at, "BUG: builtin %d", fn);
}

void jinja_add_globals(jr *r, jscope *g)
{
    static const char *const names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
    for (int i = 0; i < G_COUNT_; i++) {
        jv v = {0};
        v.t = JV_FUNC;
        v.fn = (uint16_t)i;
        scope_set(r, g, names[i], strlen(names[i]), v);
    }
    (void)mk_str;
}
