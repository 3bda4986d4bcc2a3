/*
 * eval.c - the renderer of the chat-template engine (jinja.h):
 * statements, expressions with Python semantics, variable scopes,
 * attribute and item access as jinja2's sandbox does them, macros and
 * call blocks, and the render limits. Filters, tests and methods are in
 * jinja_builtins.c.
 *
 * Scopes follow jinja2: a for loop body gets a fresh scope per iteration,
 * macro and call-block bodies get their own, if blocks share their
 * parent's; lookups walk outwards to the template's top level, then the
 * globals (range, namespace, dict, raise_exception, strftime_now, ...).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja/jinja_int.h"
#include "ruvllm.h"

const jlimits JINJA_DEFAULT_LIMITS = {
    .max_ops = 20000000,
    .max_depth = 400,
    .max_output = (size_t)64 << 20,
    .max_memory = (size_t)512 << 20,
};

#define MAX_CALL_DEPTH 64

/* ====================================================================
 * Errors and budget
 * ==================================================================== */

void jfail(jr *r, const jnode *at, const char *fmt, ...)
{
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    uint32_t line = at ? at->line : r->line;
    if (line)
        snprintf(r->err, sizeof r->err, "%s:%u: %s", r->name, line, m);
    else
        snprintf(r->err, sizeof r->err, "%s: %s", r->name, m);
    longjmp(r->jb, 1);
}

void jcharge(jr *r, uint64_t cost)
{
    if (cost >= r->ops_left) {
        r->ops_left = 0;
        r->limit = true;
        jfail(r, NULL, "render budget exceeded (more than %llu loop iterations and element visits)",
              (unsigned long long)r->lim.max_ops);
    }
    r->ops_left -= cost;
}

const char *jv_typename(const jv *v)
{
    switch (v->t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->flag & JL_TUPLE ? "tuple" : v->flag & JL_GEN ? "generator"
                       : v->flag & JL_VIEW ? "dict_items" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_MACRO: return "Macro";
    default: return "builtin_function_or_method";
    }
}

/* jinja2's UndefinedError message for an undefined value */
void jfail_undef(jr *r, const jnode *at, const jv *u)
{
    if (u->flag == JU_ATTR || u->flag == JU_ITEM)
        jfail(r, at, "'%s' has no attribute '%.*s'", u->fn ? "dict object" : "object",
              (int)(u->n > 60 ? 60 : u->n), u->s ? u->s : "");
    if (u->s)
        jfail(r, at, "'%.*s' is undefined", (int)(u->n > 60 ? 60 : u->n), u->s);
    jfail(r, at, "value is undefined");
}

/* An undefined value remembering what was looked up. Stored in the
 * union's `s`; the dict-ness of the owner goes in `fn` (for the message). */
static jv mk_undef(const char *name, size_t n, int kind, bool dict_owner)
{
    jv u = jv_undef();
    u.flag = (uint8_t)kind;
    u.s = name;
    u.n = n;
    u.fn = dict_owner;
    return u;
}

/* ====================================================================
 * Strings and conversions
 * ==================================================================== */

jv jstr_cat(jr *r, const char *a, size_t na, const char *b, size_t nb)
{
    if (na > r->lim.max_memory || nb > r->lim.max_memory - na)
        r->limit = true, jfail(r, NULL, "string too long");
    jcharge(r, 1 + (na + nb) / 64);
    char *s = ja_alloc(r->ar, na + nb + 1);
    if (na) memcpy(s, a, na);
    if (nb) memcpy(s + na, b, nb);
    return jv_strn(s, na + nb);
}

jv jbuf_str(jbuf *b)
{
    return b->n ? jv_strn(b->p, b->n) : jv_strn("", 0);
}

void jbuf_init(jr *r, jbuf *b)
{
    memset(b, 0, sizeof *b);
    b->ar = r->ar;
    b->max = r->lim.max_output;
    b->jb = &r->jb;
}

static void repr_str(jbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jb_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') jb_put(b, "\\\\", 2);
        else if (c == (unsigned char)q) { jb_putc(b, '\\'); jb_putc(b, (char)c); }
        else if (c == '\n') jb_put(b, "\\n", 2);
        else if (c == '\r') jb_put(b, "\\r", 2);
        else if (c == '\t') jb_put(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) jb_printf(b, "\\x%02x", c);
        else jb_putc(b, (char)c);
    }
    jb_putc(b, q);
}

/* str(v) appended to b (repr for the elements of containers) */
void jv_write(jr *r, jbuf *b, const jv *v, bool repr, int depth)
{
    char num[64];
    if (depth > 200) jfail(r, NULL, "maximum recursion depth exceeded while converting to string");
    switch (v->t) {
    case JV_UNDEF: if (repr) jb_put(b, "Undefined", 9); return;
    case JV_NONE: jb_put(b, "None", 4); return;
    case JV_BOOL: if (v->b) jb_put(b, "True", 4); else jb_put(b, "False", 5); return;
    case JV_INT: jb_printf(b, "%lld", (long long)v->i); return;
    case JV_FLOAT: jv_fmt_float(num, sizeof num, v->f); jb_put(b, num, strlen(num)); return;
    case JV_STR:
        if (repr) repr_str(b, v->s, v->n);
        else jb_put(b, v->s, v->n);
        return;
    case JV_LIST:
        if (v->flag & JL_GEN) { jb_put(b, "<generator object>", 18); return; }
        jcharge(r, v->n + 1);
        if (v->flag & JL_VIEW) jb_put(b, "dict_items([", 12);
        else jb_putc(b, v->flag & JL_TUPLE ? '(' : '[');
        for (size_t i = 0; i < v->n; i++) {
            if (i) jb_put(b, ", ", 2);
            jv_write(r, b, &v->a[i], true, depth + 1);
        }
        if (v->flag & JL_VIEW) jb_put(b, "])", 2);
        else if (v->flag & JL_TUPLE) jb_put(b, v->n == 1 ? ",)" : ")", v->n == 1 ? 2 : 1);
        else jb_putc(b, ']');
        return;
    case JV_DICT:
        jcharge(r, v->n + 1);
        jb_putc(b, '{');
        for (size_t i = 0; i < v->n; i++) {
            if (i) jb_put(b, ", ", 2);
            jv_write(r, b, &v->d[i].k, true, depth + 1);
            jb_put(b, ": ", 2);
            jv_write(r, b, &v->d[i].v, true, depth + 1);
        }
        jb_putc(b, '}');
        return;
    case JV_NS: {
        jv d = jv_dict(v->ns->d, v->ns->n);
        jb_put(b, "<Namespace ", 11);
        jv_write(r, b, &d, true, depth + 1);
        jb_putc(b, '>');
        return;
    }
    case JV_LOOP:
        jb_printf(b, "<LoopContext %zu/%zu>", v->loop->i + 1, v->loop->n);
        return;
    case JV_MACRO:
        jb_printf(b, "<Macro '%s'>", v->mac->def->lit.s ? v->mac->def->lit.s : "caller");
        return;
    default:
        jb_put(b, "<built-in function>", 19);
        return;
    }
}

/* str(v) as a value (no copy for strings) */
jv jv_tostr(jr *r, const jv *v)
{
    if (v->t == JV_STR) return *v;
    if (v->t == JV_UNDEF) return jv_strn("", 0);
    jbuf b;
    jbuf_init(r, &b);
    jv_write(r, &b, v, false, 0);
    return jbuf_str(&b);
}

bool jv_truthy(const jv *v)
{
    switch (v->t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0;
    case JV_STR: return v->n != 0;
    case JV_LIST: return (v->flag & JL_GEN) || v->n != 0;
    case JV_DICT: return v->n != 0;
    default: return true;
    }
}

static bool is_num(const jv *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }
static double num_f(const jv *v) { return v->t == JV_FLOAT ? v->f : v->t == JV_INT ? (double)v->i : v->b; }
static int64_t num_i(const jv *v) { return v->t == JV_INT ? v->i : v->b; }

/* Python ==, charged per element; depth-limited */
bool jv_eq(jr *r, const jv *a, const jv *b, int depth)
{
    if (depth > 200) jfail(r, NULL, "maximum recursion depth exceeded in comparison");
    if (is_num(a) && is_num(b)) {
        if (a->t == JV_FLOAT || b->t == JV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
    case JV_LIST:
        if ((a->flag | b->flag) & (JL_GEN | JL_VIEW)) return a->a == b->a && a->n == b->n && a->flag == b->flag;
        if ((a->flag & JL_TUPLE) != (b->flag & JL_TUPLE) || a->n != b->n) return false;
        if (a->a == b->a) return true;
        jcharge(r, a->n);
        for (size_t i = 0; i < a->n; i++)
            if (!jv_eq(r, &a->a[i], &b->a[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a->n != b->n) return false;
        if (a->d == b->d) return true;
        jcharge(r, a->n * (a->n + 1) / 2 + 1);
        for (size_t i = 0; i < a->n; i++) {
            const jv *bv = jdict_get(r, b, &a->d[i].k);
            if (!bv || !jv_eq(r, &a->d[i].v, bv, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a->ns == b->ns;
    case JV_LOOP: return a->loop == b->loop;
    case JV_MACRO: return a->mac == b->mac;
    default: return a->fn == b->fn;
    }
}

/* Python <: -1 (a<b), 0, 1; TypeError for unorderable types */
int jv_cmp(jr *r, const jnode *at, const jv *a, const jv *b, int depth)
{
    if (depth > 200) jfail(r, at, "maximum recursion depth exceeded in comparison");
    if (is_num(a) && is_num(b)) {
        if (a->t == JV_FLOAT || b->t == JV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->n < b->n ? a->n : b->n;
        int c = memcmp(a->s, b->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
    }
    if (a->t == JV_LIST && b->t == JV_LIST && !((a->flag | b->flag) & (JL_GEN | JL_VIEW)) &&
        (a->flag & JL_TUPLE) == (b->flag & JL_TUPLE)) {
        size_t n = a->n < b->n ? a->n : b->n;
        jcharge(r, n + 1);
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(r, &a->a[i], &b->a[i], depth + 1)) continue;
            return jv_cmp(r, at, &a->a[i], &b->a[i], depth + 1);
        }
        return a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
    }
    if (a->t == JV_UNDEF) jfail_undef(r, at, a);
    if (b->t == JV_UNDEF) jfail_undef(r, at, b);
    jfail(r, at, "'<' not supported between instances of '%s' and '%s'", jv_typename(a), jv_typename(b));
}

/* ====================================================================
 * Containers
 * ==================================================================== */

const jv *jdict_get(jr *r, const jv *d, const jv *k)
{
    for (size_t i = 0; i < d->n; i++) {
        const jv *dk = &d->d[i].k;
        if (k->t == JV_STR) {
            if (dk->t == JV_STR && dk->n == k->n && memcmp(dk->s, k->s, k->n) == 0) return &d->d[i].v;
        } else if (jv_eq(r, dk, k, 0)) {
            return &d->d[i].v;
        }
    }
    return NULL;
}

static const jv *jdict_gets(const jkv *d, size_t n, const char *k, size_t kn)
{
    for (size_t i = 0; i < n; i++)
        if (d[i].k.t == JV_STR && d[i].k.n == kn && memcmp(d[i].k.s, k, kn) == 0) return &d[i].v;
    return NULL;
}

/* Code point offsets of a string (n+1 entries), or NULL when it is ASCII. */
size_t *jstr_offsets(jr *r, const jv *s, size_t *ncp)
{
    size_t n = utf8_count(s->s, s->n);
    *ncp = n;
    if (n == s->n) return NULL;
    size_t *off = ja_alloc(r->ar, (n + 1) * sizeof *off);
    size_t i = 0, k = 0;
    while (i < s->n && k < n) {   /* utf8_count walked the same steps */
        off[k++] = i;
        utf8_next(s->s, s->n, &i);
    }
    off[k] = s->n;
    *ncp = k;
    return off;
}

/* Items of an iterable, as a `for` loop sees them. */
jv jv_iter(jr *r, const jnode *at, const jv *v)
{
    switch (v->t) {
    case JV_LIST: return jv_list(v->a, v->n);
    case JV_UNDEF: return jv_list(NULL, 0);
    case JV_DICT: {
        jv *a = ja_alloc(r->ar, (v->n + 1) * sizeof *a);
        for (size_t i = 0; i < v->n; i++) a[i] = v->d[i].k;
        jcharge(r, v->n);
        return jv_list(a, v->n);
    }
    case JV_STR: {
        size_t ncp;
        size_t *off = jstr_offsets(r, v, &ncp);
        jv *a = ja_alloc(r->ar, (ncp + 1) * sizeof *a);
        for (size_t i = 0; i < ncp; i++)
            a[i] = off ? jv_strn(v->s + off[i], off[i + 1] - off[i]) : jv_strn(v->s + i, 1);
        jcharge(r, ncp / 8);
        return jv_list(a, ncp);
    }
    default:
        jfail(r, at, "'%s' object is not iterable", jv_typename(v));
    }
}

/* loop.<name> */
static jv loop_attr(const jloop *l, const char *name, size_t n, bool *ok)
{
    *ok = true;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index")) return jv_int((int64_t)l->i + 1);
    if (IS("index0")) return jv_int((int64_t)l->i);
    if (IS("revindex")) return jv_int((int64_t)(l->n - l->i));
    if (IS("revindex0")) return jv_int((int64_t)(l->n - l->i - 1));
    if (IS("first")) return jv_bool(l->i == 0);
    if (IS("last")) return jv_bool(l->i + 1 == l->n);
    if (IS("length")) return jv_int((int64_t)l->n);
    if (IS("depth")) return jv_int(l->depth0 + 1);
    if (IS("depth0")) return jv_int(l->depth0);
    if (IS("previtem")) return l->i > 0 ? l->items[l->i - 1] : mk_undef("previtem", 8, JU_PLAIN, false);
    if (IS("nextitem")) return l->i + 1 < l->n ? l->items[l->i + 1] : mk_undef("nextitem", 8, JU_PLAIN, false);
#undef IS
    *ok = false;
    return jv_undef();
}

/* jinja2's sandboxed getattr(obj, name): attributes, then items */
jv jv_getattr(jr *r, const jnode *at, const jv *o, const char *name, size_t n)
{
    bool ok;
    switch (o->t) {
    case JV_UNDEF:
        jfail_undef(r, at, o);
    case JV_DICT: {
        const jv *v = jdict_gets(o->d, o->n, name, n);
        if (v) return *v;
        return mk_undef(name, n, JU_ATTR, true);
    }
    case JV_NS: {
        const jv *v = jdict_gets(o->ns->d, o->ns->n, name, n);
        if (v) return *v;
        break;
    }
    case JV_LOOP: {
        jv v = loop_attr(o->loop, name, n, &ok);
        if (ok) return v;
        break;
    }
    default:
        break;
    }
    return mk_undef(name, n, JU_ATTR, false);
}

static int64_t index_of(jr *r, const jnode *at, const jv *k, bool *is_int)
{
    (void)r; (void)at;
    *is_int = k->t == JV_INT || k->t == JV_BOOL;
    return *is_int ? num_i(k) : 0;
}

/* Python slice bounds for a sequence of length n */
static void slice_bounds(jr *r, const jnode *at, size_t len, const jv *st, const jv *sp, const jv *sk,
                         int64_t *start, int64_t *stop, int64_t *step, size_t *count)
{
    int64_t n = (int64_t)len, s = 1;
    const jv *vals[3] = {st, sp, sk};
    for (int k = 0; k < 3; k++)
        if (vals[k] && vals[k]->t != JV_NONE && vals[k]->t != JV_UNDEF && vals[k]->t != JV_INT && vals[k]->t != JV_BOOL)
            jfail(r, at, "slice indices must be integers or None or have an __index__ method");
    if (sk && (sk->t == JV_INT || sk->t == JV_BOOL)) s = num_i(sk);
    if (s == 0) jfail(r, at, "slice step cannot be zero");
    int64_t a, b;
    bool has_a = st && (st->t == JV_INT || st->t == JV_BOOL), has_b = sp && (sp->t == JV_INT || sp->t == JV_BOOL);
    if (s > 0) {
        a = has_a ? num_i(st) : 0;
        b = has_b ? num_i(sp) : n;
        if (a < 0) { a += n; if (a < 0) a = 0; } else if (a > n) a = n;
        if (b < 0) { b += n; if (b < 0) b = 0; } else if (b > n) b = n;
        *count = b > a ? (size_t)((b - a + s - 1) / s) : 0;
    } else {
        if (s == INT64_MIN) s = -INT64_MAX;
        a = has_a ? num_i(st) : n - 1;
        b = has_b ? num_i(sp) : -1 - n;   /* "before the start" */
        if (a < 0) { a += n; if (a < 0) a = -1; } else if (a >= n) a = n - 1;
        if (b < 0) { b += n; if (b < 0) b = -1; } else if (b >= n) b = n - 1;
        *count = a > b ? (size_t)((a - b - s - 1) / -s) : 0;
    }
    *start = a;
    *stop = b;
    *step = s;
}

jv jv_slice(jr *r, const jnode *at, const jv *o, const jv *st, const jv *sp, const jv *sk)
{
    int64_t a, b, s;
    size_t cnt;
    if (o->t == JV_STR) {
        size_t ncp;
        size_t *off = jstr_offsets(r, o, &ncp);
        slice_bounds(r, at, ncp, st, sp, sk, &a, &b, &s, &cnt);
        jcharge(r, 1 + cnt / 16);
        if (s == 1) {
            size_t x = off ? off[a] : (size_t)a, y = off ? off[a + (int64_t)cnt] : (size_t)(a + (int64_t)cnt);
            return jv_strn(o->s + x, y - x);
        }
        jbuf bf;
        jbuf_init(r, &bf);
        for (size_t k = 0; k < cnt; k++) {
            int64_t i = a + (int64_t)k * s;
            if (off) jb_put(&bf, o->s + off[i], off[i + 1] - off[i]);
            else jb_putc(&bf, o->s[i]);
        }
        return jbuf_str(&bf);
    }
    if (o->t == JV_LIST && !(o->flag & (JL_GEN | JL_VIEW))) {
        slice_bounds(r, at, o->n, st, sp, sk, &a, &b, &s, &cnt);
        jcharge(r, 1 + cnt / 4);
        if (s == 1) {
            jv v = jv_list(o->a + a, cnt);
            v.flag = o->flag;
            return v;
        }
        jv *items = ja_alloc(r->ar, (cnt + 1) * sizeof *items);
        for (size_t k = 0; k < cnt; k++) items[k] = o->a[a + (int64_t)k * s];
        jv v = jv_list(items, cnt);
        v.flag = o->flag;
        return v;
    }
    if (o->t == JV_UNDEF) jfail_undef(r, at, o);
    return mk_undef("slice", 5, JU_ITEM, false);
}

/* jinja2's sandboxed getitem(obj, key): items, then attributes for str keys */
jv jv_getitem(jr *r, const jnode *at, const jv *o, const jv *k)
{
    bool is_int;
    switch (o->t) {
    case JV_UNDEF:
        jfail_undef(r, at, o);
    case JV_DICT: {
        const jv *v = jdict_get(r, o, k);
        if (v) return *v;
        if (k->t == JV_STR) return mk_undef(k->s, k->n, JU_ITEM, true);
        return mk_undef("item", 4, JU_ITEM, true);
    }
    case JV_LIST:
        if (o->flag & (JL_GEN | JL_VIEW)) break;
        {
            int64_t i = index_of(r, at, k, &is_int);
            if (!is_int) break;
            if (i < 0) i += (int64_t)o->n;
            if (i < 0 || i >= (int64_t)o->n) return mk_undef("index", 5, JU_PLAIN, false);
            return o->a[i];
        }
    case JV_STR: {
        int64_t i = index_of(r, at, k, &is_int);
        if (!is_int) break;
        size_t ncp;
        size_t *off = jstr_offsets(r, o, &ncp);
        if (i < 0) i += (int64_t)ncp;
        if (i < 0 || i >= (int64_t)ncp) return mk_undef("index", 5, JU_PLAIN, false);
        return off ? jv_strn(o->s + off[i], off[i + 1] - off[i]) : jv_strn(o->s + i, 1);
    }
    default:
        break;
    }
    if (k->t == JV_STR) return jv_getattr(r, at, o, k->s, k->n);
    return mk_undef("item", 4, JU_ITEM, false);
}

/* ====================================================================
 * Scopes
 * ==================================================================== */

static jscope *scope_new(jr *r, jscope *parent)
{
    jscope *s = ja_alloc(r->ar, sizeof *s);
    s->parent = parent;
    return s;
}

void scope_set(jr *r, jscope *s, const char *name, size_t n, jv v)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].k.n == n && memcmp(s->v[i].k.s, name, n) == 0) {
            s->v[i].v = v;
            return;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        jkv *nv = ja_alloc(r->ar, nc * sizeof *nv);
        if (s->n) memcpy(nv, s->v, s->n * sizeof *nv);
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n].k = jv_strn(name, n);
    s->v[s->n].v = v;
    s->n++;
}

static const jv *scope_get(const jscope *s, const char *name, size_t n)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->v[i].k.n == n && memcmp(s->v[i].k.s, name, n) == 0) return &s->v[i].v;
    return NULL;
}

/* ====================================================================
 * Arithmetic
 * ==================================================================== */

static void need_defined(jr *r, const jnode *at, const jv *a, const jv *b)
{
    if (a->t == JV_UNDEF) jfail_undef(r, at, a);
    if (b->t == JV_UNDEF) jfail_undef(r, at, b);
}

static void __attribute__((noreturn)) bad_operands(jr *r, const jnode *at, const char *op, const jv *a, const jv *b)
{
    need_defined(r, at, a, b);
    if (a->t == JV_STR && !strcmp(op, "+"))
        jfail(r, at, "can only concatenate str (not \"%s\") to str", jv_typename(b));
    if (a->t == JV_LIST && !strcmp(op, "+"))
        jfail(r, at, "can only concatenate %s (not \"%s\") to %s", jv_typename(a), jv_typename(b), jv_typename(a));
    jfail(r, at, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_typename(a), jv_typename(b));
}

static jv repeat(jr *r, const jnode *at, const jv *seq, int64_t times)
{
    if (times <= 0) return seq->t == JV_STR ? jv_strn("", 0) : jv_list(NULL, 0);
    size_t unit = seq->t == JV_STR ? seq->n : seq->n * sizeof(jv);
    if (unit && (uint64_t)times > r->lim.max_memory / unit && (r->limit = true))
        jfail(r, at, "repeated sequence too large");
    size_t total = unit * (size_t)times;
    jcharge(r, 1 + total / 64);
    if (seq->t == JV_STR) {
        char *s = ja_alloc(r->ar, total + 1);
        for (int64_t k = 0; k < times; k++) memcpy(s + (size_t)k * seq->n, seq->s, seq->n);
        return jv_strn(s, total);
    }
    jv *a = ja_alloc(r->ar, total + sizeof(jv));
    for (int64_t k = 0; k < times; k++) memcpy(a + (size_t)k * seq->n, seq->a, seq->n * sizeof(jv));
    jv v = jv_list(a, seq->n * (size_t)times);
    v.flag = seq->flag & JL_TUPLE;
    return v;
}

static double py_fmod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    else if (m == 0) m = copysign(0.0, b);
    return m;
}

jv jv_binop(jr *r, const jnode *at, int op, const jv *a, const jv *b)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == JOP_CAT) {
        jv x = jv_tostr(r, a), y = jv_tostr(r, b);
        return jstr_cat(r, x.s, x.n, y.s, y.n);
    }
    bool ints = (a->t == JV_INT || a->t == JV_BOOL) && (b->t == JV_INT || b->t == JV_BOOL);
    if (is_num(a) && is_num(b)) {
        if (ints) {
            int64_t x = num_i(a), y = num_i(b), z;
            switch (op) {
            case JOP_ADD: if (__builtin_add_overflow(x, y, &z)) goto ovf; return jv_int(z);
            case JOP_SUB: if (__builtin_sub_overflow(x, y, &z)) goto ovf; return jv_int(z);
            case JOP_MUL: if (__builtin_mul_overflow(x, y, &z)) goto ovf; return jv_int(z);
            case JOP_DIV: if (!y) goto zero; return jv_float((double)x / (double)y);
            case JOP_FDIV:
                if (!y) goto zero;
                if (x == INT64_MIN && y == -1) goto ovf;
                z = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
                return jv_int(z);
            case JOP_MOD:
                if (!y) goto zero;
                if (y == -1) return jv_int(0);
                z = x % y;
                if (z != 0 && ((z < 0) != (y < 0))) z += y;
                return jv_int(z);
            case JOP_POW: {
                if (y < 0) return jv_float(pow((double)x, (double)y));
                int64_t base = x;
                z = 1;
                for (int64_t e = y; e; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(z, base, &z)) goto ovf;
                    if ((e >> 1) && __builtin_mul_overflow(base, base, &base)) goto ovf;
                }
                return jv_int(z);
            }
            }
        }
        double x = num_f(a), y = num_f(b);
        switch (op) {
        case JOP_ADD: return jv_float(x + y);
        case JOP_SUB: return jv_float(x - y);
        case JOP_MUL: return jv_float(x * y);
        case JOP_DIV: if (y == 0) goto zero; return jv_float(x / y);
        case JOP_FDIV: if (y == 0) goto zero; return jv_float(floor(x / y));
        case JOP_MOD: if (y == 0) goto zero; return jv_float(py_fmod(x, y));
        case JOP_POW: return jv_float(pow(x, y));
        }
    }
    switch (op) {
    case JOP_ADD:
        if (a->t == JV_STR && b->t == JV_STR) return jstr_cat(r, a->s, a->n, b->s, b->n);
        if (a->t == JV_LIST && b->t == JV_LIST && !((a->flag | b->flag) & (JL_GEN | JL_VIEW)) &&
            (a->flag & JL_TUPLE) == (b->flag & JL_TUPLE)) {
            size_t n = a->n + b->n;
            if (n > r->lim.max_memory / sizeof(jv) && (r->limit = true)) jfail(r, at, "list too long");
            jcharge(r, 1 + n / 16);
            jv *items = ja_alloc(r->ar, (n + 1) * sizeof *items);
            if (a->n) memcpy(items, a->a, a->n * sizeof *items);
            if (b->n) memcpy(items + a->n, b->a, b->n * sizeof *items);
            jv v = jv_list(items, n);
            v.flag = a->flag & JL_TUPLE;
            return v;
        }
        break;
    case JOP_MUL:
        if ((a->t == JV_STR || (a->t == JV_LIST && !(a->flag & (JL_GEN | JL_VIEW)))) && (b->t == JV_INT || b->t == JV_BOOL))
            return repeat(r, at, a, num_i(b));
        if ((b->t == JV_STR || (b->t == JV_LIST && !(b->flag & (JL_GEN | JL_VIEW)))) && (a->t == JV_INT || a->t == JV_BOOL))
            return repeat(r, at, b, num_i(a));
        break;
    case JOP_MOD:
        if (a->t == JV_STR) return jv_percent_format(r, at, a, b);
        break;
    }
    bad_operands(r, at, op >= 0 && op <= JOP_CAT ? names[op] : "?", a, b);
zero:
    jfail(r, at, op == JOP_MOD ? "integer modulo by zero" : op == JOP_FDIV && ints ? "integer division or modulo by zero"
                 : ints ? "division by zero" : "float division by zero");
ovf:
    jfail(r, at, "integer overflow (values beyond 64 bits are not supported)");
}

static bool contains(jr *r, const jnode *at, const jv *item, const jv *seq)
{
    switch (seq->t) {
    case JV_STR:
        if (item->t != JV_STR) {
            if (item->t == JV_UNDEF) jfail_undef(r, at, item);
            jfail(r, at, "'in <string>' requires string as left operand, not %s", jv_typename(item));
        }
        jcharge(r, 1 + seq->n / 64);
        return item->n == 0 || memmem(seq->s, seq->n, item->s, item->n) != NULL;
    case JV_LIST:
        jcharge(r, 1 + seq->n);
        for (size_t i = 0; i < seq->n; i++)
            if (jv_eq(r, item, &seq->a[i], 0)) return true;
        return false;
    case JV_DICT:
        return jdict_get(r, seq, item) != NULL;
    case JV_UNDEF:
        return false;
    case JV_NS:
        jfail(r, at, "argument of type 'Namespace' is not iterable");
    default:
        jfail(r, at, "argument of type '%s' is not iterable", jv_typename(seq));
    }
}

/* ====================================================================
 * Expressions
 * ==================================================================== */

static void exec_body(jr *r, jnode *const *body, size_t n, jscope *sc, jbuf *out);

static void eval_args(jr *r, const jnode *nd, jscope *sc, jargs *a)
{
    memset(a, 0, sizeof *a);
    a->npos = nd->nargs;
    a->pos = ja_alloc(r->ar, (nd->nargs + 1) * sizeof *a->pos);
    for (size_t i = 0; i < nd->nargs; i++) a->pos[i] = jeval(r, nd->args[i], sc);
    a->nkw = nd->nkw;
    a->kwn = nd->kwn;
    a->kwv = ja_alloc(r->ar, (nd->nkw + 1) * sizeof *a->kwv);
    for (size_t i = 0; i < nd->nkw; i++) a->kwv[i] = jeval(r, nd->kwv[i], sc);
}

/* Render a macro call: arguments bound in a fresh scope over the scope
 * the macro was defined in. */
jv jcall_macro(jr *r, const jnode *at, const jmacro *m, const jargs *a, const jmacro *caller)
{
    const jnode *def = m->def;
    if (++r->call_depth > MAX_CALL_DEPTH && (r->limit = true))
        jfail(r, at, "macro calls nested too deeply (more than %d)", MAX_CALL_DEPTH);
    jcharge(r, 1);
    jscope *sc = scope_new(r, m->closure);
    size_t np = def->nnames;
    for (size_t i = 0; i < np; i++) {
        const char *pn = def->names[i];
        size_t pl = strlen(pn);
        jv v = jv_undef();
        bool got = false;
        if (i < a->npos) { v = a->pos[i]; got = true; }
        for (size_t k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], pn)) {
                if (got) jfail(r, at, "macro '%s' got multiple values for argument '%s'",
                               def->lit.s ? def->lit.s : "caller", pn);
                v = a->kwv[k];
                got = true;
            }
        if (!got) {
            if (def->kwv && def->kwv[i]) v = jeval(r, def->kwv[i], sc);
            else v = mk_undef(pn, pl, JU_NAME, false);
        }
        scope_set(r, sc, pn, pl, v);
    }
    /* extra positional arguments: varargs; unknown keywords: kwargs */
    size_t nextra = a->npos > np ? a->npos - np : 0;
    jv va = jv_list(a->pos + np, nextra);
    va.flag = JL_TUPLE;
    if (!nextra) va.a = NULL;
    scope_set(r, sc, "varargs", 7, va);
    size_t nk = 0;
    jkv *kw = ja_alloc(r->ar, (a->nkw + 1) * sizeof *kw);
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < np; i++)
            if (!strcmp(a->kwn[k], def->names[i])) known = true;
        if (!known) {
            kw[nk].k = jv_strn(a->kwn[k], strlen(a->kwn[k]));
            kw[nk++].v = a->kwv[k];
        }
    }
    scope_set(r, sc, "kwargs", 6, jv_dict(kw, nk));
    if (caller) {
        jv cv = {0};
        cv.t = JV_MACRO;
        cv.mac = (jmacro *)caller;
        scope_set(r, sc, "caller", 6, cv);
    }
    jbuf b;
    jbuf_init(r, &b);
    int saved_flow = r->flow;
    exec_body(r, def->body, def->nbody, sc, &b);
    r->flow = saved_flow;
    r->call_depth--;
    return jbuf_str(&b);
}

static jv eval_call(jr *r, const jnode *nd, jscope *sc)
{
    const jnode *fn = nd->a;
    jargs a;
    if (fn->kind == JN_ATTR) {
        jv obj = jeval(r, fn->a, sc);
        if (obj.t != JV_UNDEF && obj.t != JV_DICT && obj.t != JV_NS) {
            eval_args(r, nd, sc, &a);
            jv res;
            if (jcall_method(r, nd, &obj, fn->lit.s, fn->lit.n, &a, &res)) return res;
        } else if (obj.t == JV_DICT) {
            eval_args(r, nd, sc, &a);
            jv res;
            if (jcall_method(r, nd, &obj, fn->lit.s, fn->lit.n, &a, &res)) return res;
        }
        jv callee = jv_getattr(r, fn, &obj, fn->lit.s, fn->lit.n);
        if (callee.t == JV_UNDEF) jfail_undef(r, nd, &callee);
        eval_args(r, nd, sc, &a);
        return jcall_value(r, nd, &callee, &a, NULL);
    }
    jv callee = jeval(r, fn, sc);
    eval_args(r, nd, sc, &a);
    return jcall_value(r, nd, &callee, &a, NULL);
}

jv jcall_value(jr *r, const jnode *at, const jv *callee, const jargs *a, const jmacro *caller)
{
    if (callee->t == JV_MACRO) return jcall_macro(r, at, callee->mac, a, caller);
    if (callee->t == JV_FUNC) return jcall_builtin(r, at, callee->fn, a);
    if (callee->t == JV_UNDEF) jfail_undef(r, at, callee);
    jfail(r, at, "'%s' object is not callable", jv_typename(callee));
}

static jv eval_name(const jnode *nd, jscope *sc)
{
    const jv *v = scope_get(sc, nd->lit.s, nd->lit.n);
    if (v) return *v;
    return mk_undef(nd->lit.s, nd->lit.n, JU_NAME, false);
}

jv jeval(jr *r, const jnode *nd, jscope *sc)
{
    if (++r->depth > r->lim.max_depth && (r->limit = true)) jfail(r, nd, "expression nested too deeply");
    jv res;
    switch (nd->kind) {
    case JN_LIT:
        res = nd->lit;
        break;
    case JN_NAME:
        res = eval_name(nd, sc);
        break;
    case JN_LIST:
    case JN_TUPLE: {
        jv *items = ja_alloc(r->ar, (nd->nargs + 1) * sizeof *items);
        for (size_t i = 0; i < nd->nargs; i++) items[i] = jeval(r, nd->args[i], sc);
        res = jv_list(items, nd->nargs);
        if (nd->kind == JN_TUPLE) res.flag = JL_TUPLE;
        break;
    }
    case JN_DICT: {
        jkv *d = ja_alloc(r->ar, (nd->nargs + 1) * sizeof *d);
        size_t n = 0;
        for (size_t i = 0; i < nd->nargs; i++) {
            jv k = jeval(r, nd->args[i], sc), v = jeval(r, nd->kwv[i], sc);
            if (k.t == JV_LIST && !(k.flag & JL_TUPLE)) jfail(r, nd, "unhashable type: 'list'");
            if (k.t == JV_DICT) jfail(r, nd, "unhashable type: 'dict'");
            jv tmp = jv_dict(d, n);
            size_t m;
            for (m = 0; m < n; m++)
                if (jv_eq(r, &d[m].k, &k, 0)) break;
            (void)tmp;
            if (m == n) { d[n].k = k; n++; }
            d[m].v = v;
        }
        res = jv_dict(d, n);
        break;
    }
    case JN_ATTR: {
        jv o = jeval(r, nd->a, sc);
        res = jv_getattr(r, nd, &o, nd->lit.s, nd->lit.n);
        break;
    }
    case JN_ITEM: {
        jv o = jeval(r, nd->a, sc);
        if (nd->b->kind == JN_SLICE) {
            const jnode *s = nd->b;
            jv st = s->a ? jeval(r, s->a, sc) : jv_none();
            jv sp = s->b ? jeval(r, s->b, sc) : jv_none();
            jv sk = s->c ? jeval(r, s->c, sc) : jv_none();
            res = jv_slice(r, nd, &o, &st, &sp, &sk);
        } else {
            jv k = jeval(r, nd->b, sc);
            res = jv_getitem(r, nd, &o, &k);
        }
        break;
    }
    case JN_CALL:
        res = eval_call(r, nd, sc);
        break;
    case JN_FILTER:
        res = jeval_filter(r, nd, sc, NULL);
        break;
    case JN_TEST: {
        jv v = jeval(r, nd->a, sc);
        jargs a;
        eval_args(r, nd, sc, &a);
        bool t = japply_test(r, nd, nd->id, &v, &a);
        res = jv_bool(nd->op ? !t : t);
        break;
    }
    case JN_NEG:
    case JN_POS: {
        jv v = jeval(r, nd->a, sc);
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = num_i(&v);
            if (nd->kind == JN_NEG && i == INT64_MIN) jfail(r, nd, "integer overflow");
            res = jv_int(nd->kind == JN_NEG ? -i : i);
        } else if (v.t == JV_FLOAT) {
            res = jv_float(nd->kind == JN_NEG ? -v.f : v.f);
        } else {
            if (v.t == JV_UNDEF) jfail_undef(r, nd, &v);
            jfail(r, nd, "bad operand type for unary %c: '%s'", nd->kind == JN_NEG ? '-' : '+', jv_typename(&v));
        }
        break;
    }
    case JN_NOT: {
        jv v = jeval(r, nd->a, sc);
        res = jv_bool(!jv_truthy(&v));
        break;
    }
    case JN_AND: {
        jv l = jeval(r, nd->a, sc);
        res = jv_truthy(&l) ? jeval(r, nd->b, sc) : l;
        break;
    }
    case JN_OR: {
        jv l = jeval(r, nd->a, sc);
        res = jv_truthy(&l) ? l : jeval(r, nd->b, sc);
        break;
    }
    case JN_BIN: {
        jv l = jeval(r, nd->a, sc), rt = jeval(r, nd->b, sc);
        res = jv_binop(r, nd, nd->op, &l, &rt);
        break;
    }
    case JN_CMP: {
        jv l = jeval(r, nd->a, sc);
        res = jv_bool(true);
        for (size_t i = 0; i < nd->nargs; i++) {
            jv rt = jeval(r, nd->args[i], sc);
            bool ok;
            switch (nd->ops[i]) {
            case JOP_EQ: ok = jv_eq(r, &l, &rt, 0); break;
            case JOP_NE: ok = !jv_eq(r, &l, &rt, 0); break;
            case JOP_LT: ok = jv_cmp(r, nd, &l, &rt, 0) < 0; break;
            case JOP_LE: ok = jv_cmp(r, nd, &l, &rt, 0) <= 0; break;
            case JOP_GT: ok = jv_cmp(r, nd, &l, &rt, 0) > 0; break;
            case JOP_GE: ok = jv_cmp(r, nd, &l, &rt, 0) >= 0; break;
            case JOP_IN: ok = contains(r, nd, &l, &rt); break;
            default: ok = !contains(r, nd, &l, &rt); break;
            }
            if (!ok) { res = jv_bool(false); break; }
            l = rt;
        }
        break;
    }
    case JN_COND: {
        jv c = jeval(r, nd->b, sc);
        if (jv_truthy(&c)) res = jeval(r, nd->a, sc);
        else if (nd->c) res = jeval(r, nd->c, sc);
        else res = mk_undef(NULL, 0, JU_PLAIN, false);
        break;
    }
    default:
        jfail(r, nd, "BUG: not an expression");
    }
    r->depth--;
    return res;
}

/* x|f(args): `base` replaces the innermost input of a filter-block chain */
jv jeval_filter(jr *r, const jnode *nd, jscope *sc, const jv *base)
{
    jv in;
    if (!nd->a) in = *base;
    else if (base) in = jeval_filter(r, nd->a, sc, base);
    else in = jeval(r, nd->a, sc);
    jargs a;
    eval_args(r, nd, sc, &a);
    return japply_filter(r, nd, nd->id, &in, &a);
}

/* ====================================================================
 * Statements
 * ==================================================================== */

static void assign_targets(jr *r, const jnode *at, jscope *sc, const char *const *names, size_t nn, const jv *v)
{
    if (nn == 1) {
        scope_set(r, sc, names[0], strlen(names[0]), *v);
        return;
    }
    jv items = *v;
    if (v->t == JV_STR || v->t == JV_DICT) items = jv_iter(r, at, v);
    if (items.t != JV_LIST || (items.flag & JL_GEN && 0)) {
        if (v->t == JV_UNDEF) jfail_undef(r, at, v);
        jfail(r, at, "cannot unpack non-iterable %s object", jv_typename(v));
    }
    if (items.n < nn) jfail(r, at, "not enough values to unpack (expected %zu, got %zu)", nn, items.n);
    if (items.n > nn) jfail(r, at, "too many values to unpack (expected %zu)", nn);
    for (size_t i = 0; i < nn; i++) scope_set(r, sc, names[i], strlen(names[i]), items.a[i]);
}

static void exec_for(jr *r, const jnode *nd, jscope *sc, jbuf *out)
{
    jv src = jeval(r, nd->a, sc);
    jv items = jv_iter(r, nd, &src);
    if (nd->b) {
        /* {% for x in xs if cond %}: filter first; loop.* counts what passes */
        jv *kept = ja_alloc(r->ar, (items.n + 1) * sizeof *kept);
        size_t k = 0;
        for (size_t i = 0; i < items.n; i++) {
            jcharge(r, 1);
            jscope *fs = scope_new(r, sc);
            assign_targets(r, nd, fs, nd->names, nd->nnames, &items.a[i]);
            jv c = jeval(r, nd->b, fs);
            if (jv_truthy(&c)) kept[k++] = items.a[i];
        }
        items = jv_list(kept, k);
    }
    jloop *l = ja_alloc(r->ar, sizeof *l);
    l->items = items.a;
    l->n = items.n;
    l->depth0 = 0;   /* only recursive loops (unsupported) go deeper */
    jv lv = {0};
    lv.t = JV_LOOP;
    lv.loop = l;
    for (size_t i = 0; i < items.n; i++) {
        jcharge(r, 1);
        l->i = i;
        jscope *is = scope_new(r, sc);
        assign_targets(r, nd, is, nd->names, nd->nnames, &items.a[i]);
        scope_set(r, is, "loop", 4, lv);
        exec_body(r, nd->body, nd->nbody, is, out);
        if (r->flow == FLOW_BREAK) { r->flow = 0; break; }
        if (r->flow == FLOW_CONTINUE) r->flow = 0;
    }
    if (items.n == 0 && nd->op)
        exec_body(r, nd->body2, nd->nbody2, sc, out);
}

static void exec_stmt(jr *r, const jnode *nd, jscope *sc, jbuf *out)
{
    r->line = nd->line;
    switch (nd->kind) {
    case JN_TEXT:
        jb_put(out, nd->lit.s, nd->lit.n);
        break;
    case JN_PRINT: {
        jv v = jeval(r, nd->a, sc);
        jv_write(r, out, &v, false, 0);
        break;
    }
    case JN_IF: {
        jv c = jeval(r, nd->a, sc);
        if (jv_truthy(&c)) exec_body(r, nd->body, nd->nbody, sc, out);
        else exec_body(r, nd->body2, nd->nbody2, sc, out);
        break;
    }
    case JN_FOR:
        exec_for(r, nd, sc, out);
        break;
    case JN_SET: {
        jv v = jeval(r, nd->a, sc);
        if (nd->op) {
            const jv *ns = scope_get(sc, nd->names[0], strlen(nd->names[0]));
            if (!ns || ns->t != JV_NS) jfail(r, nd, "cannot assign attribute on non-namespace object");
            struct jns *n = ns->ns;
            for (size_t i = 0; i < n->n; i++)
                if (n->d[i].k.n == nd->lit.n && memcmp(n->d[i].k.s, nd->lit.s, nd->lit.n) == 0) {
                    n->d[i].v = v;
                    return;
                }
            if (n->n == n->cap) {
                size_t nc = n->cap ? n->cap * 2 : 8;
                jkv *d = ja_alloc(r->ar, nc * sizeof *d);
                if (n->n) memcpy(d, n->d, n->n * sizeof *d);
                n->d = d;
                n->cap = nc;
            }
            n->d[n->n].k = nd->lit;
            n->d[n->n++].v = v;
        } else {
            assign_targets(r, nd, sc, nd->names, nd->nnames, &v);
        }
        break;
    }
    case JN_SETBLOCK:
    case JN_FILTERBLOCK: {
        jbuf b;
        jbuf_init(r, &b);
        /* the body shares the scope: jinja2 renders it in place */
        exec_body(r, nd->body, nd->nbody, sc, &b);
        jv v = jbuf_str(&b);
        if (nd->b) v = jeval_filter(r, nd->b, sc, &v);
        if (nd->kind == JN_SETBLOCK) scope_set(r, sc, nd->names[0], strlen(nd->names[0]), v);
        else jv_write(r, out, &v, false, 0);
        break;
    }
    case JN_MACRO: {
        jmacro *m = ja_alloc(r->ar, sizeof *m);
        m->def = nd;
        m->closure = sc;
        jv v = {0};
        v.t = JV_MACRO;
        v.mac = m;
        scope_set(r, sc, nd->lit.s, nd->lit.n, v);
        break;
    }
    case JN_CALLBLOCK: {
        jmacro *caller = ja_alloc(r->ar, sizeof *caller);
        caller->def = nd;
        caller->closure = sc;
        const jnode *call = nd->a;
        jv callee;
        jargs a;
        if (call->a->kind == JN_ATTR) {
            jv o = jeval(r, call->a->a, sc);
            callee = jv_getattr(r, call->a, &o, call->a->lit.s, call->a->lit.n);
        } else {
            callee = jeval(r, call->a, sc);
        }
        eval_args(r, call, sc, &a);
        if (callee.t != JV_MACRO) {
            if (callee.t == JV_UNDEF) jfail_undef(r, nd, &callee);
            jfail(r, nd, "call blocks need a macro, not '%s'", jv_typename(&callee));
        }
        jv v = jcall_macro(r, nd, callee.mac, &a, caller);
        jb_put(out, v.s, v.n);
        break;
    }
    case JN_BREAK:
        r->flow = FLOW_BREAK;
        break;
    case JN_CONTINUE:
        r->flow = FLOW_CONTINUE;
        break;
    case JN_GENERATION:
        exec_body(r, nd->body, nd->nbody, sc, out);
        break;
    default:
        jfail(r, nd, "BUG: not a statement");
    }
}

static void exec_body(jr *r, jnode *const *body, size_t n, jscope *sc, jbuf *out)
{
    if (++r->depth > r->lim.max_depth && (r->limit = true))
        jfail(r, n ? body[0] : NULL, "statements nested too deeply");
    for (size_t i = 0; i < n && !r->flow; i++) exec_stmt(r, body[i], sc, out);
    r->depth--;
}

/* ====================================================================
 * Entry point
 * ==================================================================== */

static void render_oom(void *ud)
{
    jr *r = ud;
    snprintf(r->err, sizeof r->err, "%s: render memory limit exceeded (%zu MiB)", r->name,
             r->lim.max_memory >> 20);
}

int jinja_render(const jtmpl *t, jarena *ar, jv ctx, int64_t now, const jlimits *lim,
                 char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    jr *r = calloc(1, sizeof *r);
    if (!r) return rvl_seterr(RVL_ENOMEM, "%s: out of memory", t->name);
    r->lim = lim ? *lim : JINJA_DEFAULT_LIMITS;
    r->ops_left = r->lim.max_ops;
    r->ar = ar;
    r->name = t->name;
    r->now = now;
    ar->cap = r->lim.max_memory;
    ar->oom = &r->jb;
    ar->on_oom = render_oom;
    ar->ud = r;
    int rc = setjmp(r->jb);
    if (rc) {
        int code = rc == 1 && !r->limit ? RVL_EFORMAT : RVL_ERANGE;
        if (rc == 3)
            snprintf(r->err, sizeof r->err, "%s: output longer than %zu bytes", r->name, r->lim.max_output);
        rvl_seterr(code, "%s", r->err);
        ar->oom = NULL;
        ar->on_oom = NULL;
        free(r);
        return code;
    }
    jscope *globals = scope_new(r, NULL);
    jinja_add_globals(r, globals);
    jscope *root = scope_new(r, globals);
    if (ctx.t == JV_DICT)
        for (size_t i = 0; i < ctx.n; i++)
            if (ctx.d[i].k.t == JV_STR) scope_set(r, root, ctx.d[i].k.s, ctx.d[i].k.n, ctx.d[i].v);
    jbuf b;
    jbuf_init(r, &b);
    exec_body(r, t->body, t->nbody, root, &b);
    char *s = malloc(b.n + 1);
    if (!s) {
        ar->oom = NULL;
        free(r);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", t->name);
    }
    if (b.n) memcpy(s, b.p, b.n);
    s[b.n] = 0;
    *out = s;
    if (out_len) *out_len = b.n;
    ar->oom = NULL;
    ar->on_oom = NULL;
    free(r);
    return 0;
}
