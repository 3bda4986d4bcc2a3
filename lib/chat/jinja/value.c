/*
 * value.c - arena, output buffers, Python-compatible number
 * formatting, UTF-8 helpers and JSON import for the chat-template engine.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja/jinja.h"
#include "ruvllm.h"

/* ---------------------------------------------------------------- arena */
struct jchunk {
    struct jchunk *next;
    size_t size, used;
    max_align_t data[];
};

#define JCHUNK_MIN ((size_t)64 << 10)

void *ja_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    struct jchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > JCHUNK_MIN / 4 ? n : JCHUNK_MIN;
        if (a->cap && (sz > a->cap || a->used > a->cap - sz)) goto oom;
        c = malloc(sizeof *c + sz);
        if (!c) goto oom;
        c->size = sz;
        c->used = 0;
        if (sz == n && a->head) {
            /* a big block: keep the current chunk in front for small ones */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
        a->used += sz;
    }
    void *r = (char *)c->data + c->used;
    c->used += n;
    memset(r, 0, n);
    return r;
oom:
    if (a->on_oom) a->on_oom(a->ud);
    if (a->oom) longjmp(*a->oom, 2);
    abort();   /* BUG: an arena without an error exit */
}

char *ja_strndup(jarena *a, const char *s, size_t n)
{
    char *r = ja_alloc(a, n + 1);
    if (n) memcpy(r, s, n);
    r[n] = 0;
    return r;
}

void ja_free(jarena *a)
{
    struct jchunk *c = a->head;
    while (c) {
        struct jchunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---------------------------------------------------------------- buffers */
void jb_put(jbuf *b, const char *s, size_t n)
{
    if (!n) return;
    if (b->max && (n > b->max || b->n > b->max - n)) {
        if (b->jb) longjmp(*b->jb, 3);
        abort();
    }
    if (b->cap - b->n < n + 1) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc - b->n < n + 1) nc *= 2;
        char *np = ja_alloc(b->ar, nc);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_putc(jbuf *b, char c) { jb_put(b, &c, 1); }

void jb_printf(jbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    jb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* ---------------------------------------------------------------- numbers */
/* Python's repr(float): the shortest digits that round-trip, fixed
 * notation for exponents -4..15, else d.ddde+XX. */
void jv_fmt_float(char *buf, size_t cap, double f)
{
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = buf;
    size_t left = cap;
#define PUT(...) do { int k_ = snprintf(o, left, __VA_ARGS__); if (k_ < 0 || (size_t)k_ >= left) return; o += k_; left -= (size_t)k_; } while (0)
    if (neg) PUT("-");
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            PUT("0.");
            for (int k = -1; k > exp; k--) PUT("0");
            PUT("%s", digits);
        } else {
            for (int k = 0; k <= exp; k++) PUT("%c", k < (int)nd ? digits[k] : '0');
            PUT(".");
            if ((int)nd > exp + 1) PUT("%s", digits + exp + 1);
            else PUT("0");
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
#undef PUT
}

/* ---------------------------------------------------------------- UTF-8 */
/* Code points as utf8_next walks them (an invalid byte counts as one). */
size_t utf8_count(const char *s, size_t n)
{
    size_t i = 0, c = 0;
    while (i < n && (unsigned char)s[i] < 0x80) i++;
    if (i == n) return n;
    c = i;
    while (i < n) {
        utf8_next(s, n, &i);
        c++;
    }
    return c;
}

/* Decode one code point at *i (invalid bytes decode as themselves, one
 * byte each, so every byte is covered). */
uint32_t utf8_next(const char *s, size_t n, size_t *i)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i,
                                          (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) {
        cp = (unsigned char)s[*i];
        k = 1;
    }
    *i += (size_t)k;
    return (uint32_t)cp;
}

bool py_isspace(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    if (cp == 0x85 || cp == 0xA0) return true;
    const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)cp);
    return pr->category == UTF8PROC_CATEGORY_ZS || pr->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           pr->bidi_class == UTF8PROC_BIDI_CLASS_B || pr->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

/* ---------------------------------------------------------------- JSON */
static jv from_cjson(jarena *ar, const cJSON *j, int depth)
{
    if (depth > 200) return jv_none();
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        return jv_strn(ja_strndup(ar, j->valuestring, n), n);
    }
    size_t n = 0;
    for (const cJSON *c = j->child; c; c = c->next) n++;
    if (cJSON_IsArray(j)) {
        jv *a = ja_alloc(ar, (n ? n : 1) * sizeof *a);
        size_t i = 0;
        for (const cJSON *c = j->child; c; c = c->next) a[i++] = from_cjson(ar, c, depth + 1);
        return jv_list(a, n);
    }
    if (cJSON_IsObject(j)) {
        jkv *d = ja_alloc(ar, (n ? n : 1) * sizeof *d);
        size_t i = 0;
        for (const cJSON *c = j->child; c; c = c->next) {
            size_t kn = strlen(c->string);
            jv k = jv_strn(ja_strndup(ar, c->string, kn), kn);
            /* a repeated key replaces the value in place, as in Python */
            size_t m;
            for (m = 0; m < i; m++)
                if (d[m].k.n == kn && memcmp(d[m].k.s, k.s, kn) == 0) break;
            d[m].k = k;
            d[m].v = from_cjson(ar, c, depth + 1);
            if (m == i) i++;
        }
        return jv_dict(d, i);
    }
    return jv_none();
}

int jinja_from_json(jarena *ar, const char *json, size_t len, jv *out)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!j) {
        size_t off = end && end >= json ? (size_t)(end - json) : 0;
        return rvl_seterr(RVL_EFORMAT, "invalid JSON at byte %zu", off);
    }
    jmp_buf jb, *saved = ar->oom;
    ar->oom = &jb;
    if (setjmp(jb)) {
        ar->oom = saved;
        cJSON_Delete(j);
        return rvl_seterr(RVL_ERANGE, "JSON value too large");
    }
    *out = from_cjson(ar, j, 0);
    ar->oom = saved;
    cJSON_Delete(j);
    return 0;
}
