/*
 * parse.c - lexer and parser of the chat-template engine (jinja.h).
 *
 * Whitespace control follows jinja2's lexer with trim_blocks=True and
 * lstrip_blocks=True: the source has its newlines normalized to "\n" and
 * one trailing newline dropped; "{%-"/"{{-"/"{#-" strip all whitespace
 * before the tag, "-%}"/"-}}"/"-#}" all whitespace after it; otherwise a
 * block or comment tag eats one newline after it (trim_blocks) and the
 * spaces and tabs before it when only those stand between it and the start
 * of its line (lstrip_blocks; "{%+" and "+%}" opt out).
 *
 * Expressions are parsed with jinja2's precedence: conditional, or, and,
 * not, comparisons (chained), + -, ~, * / // %, **, unary - +, then
 * postfix (.attr, [item], [a:b:c], call), filters (|f) and tests (is t).
 * Unknown filters and tests are errors at parse time, as in jinja2.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja/jinja.h"
#include "ruvllm.h"

int jinja_filter_id(const char *name, size_t n);   /* jinja_eval.c; -1 if unknown */
int jinja_test_id(const char *name, size_t n);

enum { T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
       T_NAME, T_STRING, T_INT, T_FLOAT, T_OP };

typedef struct {
    uint8_t type;
    char op[3];          /* T_OP spelling */
    const char *s;       /* T_DATA/T_NAME: into the source; T_STRING: decoded (arena) */
    size_t n;
    int64_t i;
    double f;
    uint32_t line, col;
} jtok;

typedef struct {
    jarena *ar;
    const char *src;     /* normalized source (arena) */
    size_t len, pos;
    const char *name;
    jmp_buf jb;
    char err[256];
    /* tokens */
    jtok *toks; size_t ntok, captok, cur;
    int depth;
} jparser;

static void __attribute__((noreturn, format(printf, 4, 5)))
perr(jparser *p, uint32_t line, uint32_t col, const char *fmt, ...)
{
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(p->err, sizeof p->err, "%s:%u:%u: %s", p->name, line, col, m);
    longjmp(p->jb, 1);
}

static void pos_linecol(const jparser *p, size_t pos, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->src[i] == '\n') { l++; c = 1; }
        else if (((unsigned char)p->src[i] & 0xC0) != 0x80) c++;
    }
    *line = l;
    *col = c;
}

/* ====================================================================
 * Lexer
 * ==================================================================== */

/* Incremental line/column tracking: tokens are made in source order. */
typedef struct { size_t pos; uint32_t line, col; } lc_cursor;

static void lc_advance(const jparser *p, lc_cursor *c, size_t pos)
{
    for (; c->pos < pos && c->pos < p->len; c->pos++) {
        char ch = p->src[c->pos];
        if (ch == '\n') { c->line++; c->col = 1; }
        else if (((unsigned char)ch & 0xC0) != 0x80) c->col++;
    }
}

static jtok *push_tok(jparser *p, int type, lc_cursor *lc, size_t pos)
{
    if (p->ntok == p->captok) {
        size_t nc = p->captok ? p->captok * 2 : 256;
        jtok *nt = ja_alloc(p->ar, nc * sizeof *nt);
        if (p->ntok) memcpy(nt, p->toks, p->ntok * sizeof *nt);
        p->toks = nt;
        p->captok = nc;
    }
    jtok *t = &p->toks[p->ntok++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    lc_advance(p, lc, pos);
    t->line = lc->line;
    t->col = lc->col;
    return t;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Python's unicode-escape decoding of a string literal body, as jinja2's
 * lexer applies it (after backslashreplace of non-ASCII characters). */
static void decode_string(jparser *p, const char *s, size_t n, jtok *t)
{
    char *o = ja_alloc(p->ar, n * 2 + 1), *q = o;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c != '\\') { *q++ = (char)c; i++; continue; }
        if (i + 1 >= n) { *q++ = '\\'; i++; continue; }
        unsigned char e = (unsigned char)s[i + 1];
        i += 2;
        uint32_t cp;
        int nd = 0;
        switch (e) {
        case '\n': continue;
        case '\\': *q++ = '\\'; continue;
        case '\'': *q++ = '\''; continue;
        case '"': *q++ = '"'; continue;
        case 'a': *q++ = '\a'; continue;
        case 'b': *q++ = '\b'; continue;
        case 'f': *q++ = '\f'; continue;
        case 'n': *q++ = '\n'; continue;
        case 'r': *q++ = '\r'; continue;
        case 't': *q++ = '\t'; continue;
        case 'v': *q++ = '\v'; continue;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        case 'N': perr(p, t->line, t->col, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = e - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++, i++)
                    cp = cp * 8 + (uint32_t)(s[i] - '0');
                goto emit;
            }
            *q++ = '\\';
            if (e >= 0x80) {
                /* backslashreplace turned the character into an escape
                 * whose backslash this one escapes: it stays literal */
                size_t j = i - 1;
                uint32_t u = utf8_next(s, n, &j);
                q += sprintf(q, u < 0x100 ? "x%02x" : u < 0x10000 ? "u%04x" : "U%08x", u);
                i = j;
            } else {
                i--;   /* unknown escape: kept as written */
            }
            continue;
        }
        cp = 0;
        for (int k = 0; k < nd; k++, i++) {
            int h = i < n ? s[i] : 0;
            int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (v < 0)
                perr(p, t->line, t->col, "truncated \\%cXX escape in string literal", e);
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF)
            perr(p, t->line, t->col, "illegal Unicode character in string literal");
    emit:
        if (cp >= 0xD800 && cp <= 0xDFFF)
            perr(p, t->line, t->col, "surrogate code point in string literal");
        if (cp < 0x80) *q++ = (char)cp;
        else if (cp < 0x800) { *q++ = (char)(0xC0 | cp >> 6); *q++ = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            *q++ = (char)(0xE0 | cp >> 12); *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *q++ = (char)(0x80 | (cp & 0x3F));
        } else {
            *q++ = (char)(0xF0 | cp >> 18); *q++ = (char)(0x80 | ((cp >> 12) & 0x3F));
            *q++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *q++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    t->s = o;
    t->n = (size_t)(q - o);
}

/* Lex the inside of a {{ }} or {% %} tag starting at *pos; stops after the
 * closing tag. Returns true if the closing tag had a '-' (strip after). */
static void lex_tag(jparser *p, size_t *pos, bool block, lc_cursor *lc,
                    bool *strip_after, bool *keep_after)
{
    const char *s = p->src;
    size_t n = p->len, i = *pos;
    int bal = 0;
    *strip_after = *keep_after = false;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (i >= n) {
            uint32_t l, c;
            pos_linecol(p, i, &l, &c);
            perr(p, l, c, "unexpected end of template, expected '%s'", block ? "%}" : "}}");
        }
        /* closing tag */
        if (bal == 0) {
            const char *end = block ? "%}" : "}}";
            size_t k = i;
            bool minus = false, plus = false;
            if (s[k] == '-' && k + 2 < n + 1 && k + 2 <= n && strncmp(s + k + 1, end, 2) == 0) { minus = true; k++; }
            else if (block && s[k] == '+' && k + 2 <= n && strncmp(s + k + 1, end, 2) == 0) { plus = true; k++; }
            if (k + 2 <= n && strncmp(s + k, end, 2) == 0) {
                push_tok(p, block ? T_BLOCK_END : T_VAR_END, lc, i);
                i = k + 2;
                *strip_after = minus;
                *keep_after = plus;
                break;
            }
        }
        unsigned char c = (unsigned char)s[i];
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != (char)c) j += s[j] == '\\' ? 2 : 1;
            if (j >= n) {
                jtok *t = push_tok(p, T_STRING, lc, i);
                perr(p, t->line, t->col, "unterminated string literal");
            }
            jtok *t = push_tok(p, T_STRING, lc, i);
            decode_string(p, s + i + 1, j - i - 1, t);
            i = j + 1;
            continue;
        }
        if (isdigit(c)) {
            size_t j = i;
            char num[64];
            size_t k = 0;
            bool isf = false;
            while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) {
                if (s[j] != '_' && k < sizeof num - 1) num[k++] = s[j];
                j++;
            }
            if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
                isf = true;
                num[k < sizeof num - 1 ? k++ : k] = '.';
                j++;
                while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) {
                    if (s[j] != '_' && k < sizeof num - 1) num[k++] = s[j];
                    j++;
                }
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t m = j + 1;
                if (m < n && (s[m] == '+' || s[m] == '-')) m++;
                if (m < n && isdigit((unsigned char)s[m])) {
                    isf = true;
                    if (k < sizeof num - 1) num[k++] = 'e';
                    for (size_t q = j + 1; q < m; q++) if (k < sizeof num - 1) num[k++] = s[q];
                    j = m;
                    while (j < n && isdigit((unsigned char)s[j])) {
                        if (k < sizeof num - 1) num[k++] = s[j];
                        j++;
                    }
                }
            }
            num[k] = 0;
            jtok *t = push_tok(p, isf ? T_FLOAT : T_INT, lc, i);
            if (k >= sizeof num - 1)
                perr(p, t->line, t->col, "number literal too long");
            errno = 0;
            if (isf) {
                t->f = strtod(num, NULL);
            } else {
                unsigned long long v = strtoull(num, NULL, 10);
                if (errno || v > INT64_MAX)
                    perr(p, t->line, t->col, "integer literal out of range");
                t->i = (int64_t)v;
            }
            i = j;
            continue;
        }
        if (isalpha(c) || c == '_' || c >= 0x80) {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_' || (unsigned char)s[j] >= 0x80)) j++;
            jtok *t = push_tok(p, T_NAME, lc, i);
            t->s = s + i;
            t->n = j - i;
            i = j;
            continue;
        }
        static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
        jtok *t = push_tok(p, T_OP, lc, i);
        bool two = false;
        for (int k = 0; ops2[k]; k++)
            if (i + 1 < n && s[i] == ops2[k][0] && s[i + 1] == ops2[k][1]) { two = true; break; }
        if (two) {
            t->op[0] = s[i]; t->op[1] = s[i + 1];
            i += 2;
            continue;
        }
        if (!strchr("+-/*%~[](){}><=.:|,;", c))
            perr(p, t->line, t->col, "unexpected character '%c'", c >= 0x20 && c < 0x7f ? c : '?');
        t->op[0] = (char)c;
        if (c == '(' || c == '[' || c == '{') bal++;
        else if ((c == ')' || c == ']' || c == '}') && bal > 0) bal--;
        i++;
    }
    *pos = i;
}

static void emit_data(jparser *p, lc_cursor *lc, size_t start, size_t end)
{
    if (end > start) {
        jtok *t = push_tok(p, T_DATA, lc, start);
        t->s = p->src + start;
        t->n = end - start;
    }
}

/* Is `name` (with optional -/+ and spaces) the tag at s[i] ("{% raw %}")? */
static bool tag_is(const char *s, size_t n, size_t i, const char *name, size_t *after, bool *minus_after)
{
    size_t j = i + 2;
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    while (j < n && is_ws(s[j])) j++;
    size_t k = strlen(name);
    if (j + k > n || strncmp(s + j, name, k) != 0) return false;
    j += k;
    if (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_')) return false;
    while (j < n && is_ws(s[j])) j++;
    bool m = false;
    if (j < n && (s[j] == '-' || s[j] == '+')) { m = s[j] == '-'; j++; }
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}') return false;
    *after = j + 2;
    *minus_after = m;
    return true;
}

static void lex(jparser *p)
{
    const char *s = p->src;
    size_t n = p->len, i = 0;
    bool line_starting = true;
    lc_cursor lc = {0, 1, 1};
    while (i < n) {
        /* next tag opener */
        size_t j = i;
        const char *hit = NULL;
        while (j + 1 < n) {
            const char *q = memchr(s + j, '{', n - j - 1);
            if (!q) { j = n; break; }
            j = (size_t)(q - s);
            if (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#') { hit = q; break; }
            j++;
        }
        if (!hit) {
            emit_data(p, &lc, i, n);
            break;
        }
        char kind = s[j + 1];
        char sign = j + 2 < n ? s[j + 2] : 0;
        size_t dend = j;
        if (sign == '-') {
            while (dend > i && is_ws(s[dend - 1])) dend--;
        } else if (sign != '+' && kind != '{') {
            size_t l = dend;
            while (l > i && s[l - 1] != '\n') l--;
            /* only spaces between the line start and the tag */
            if ((l > i || line_starting) && l < dend) {
                bool allws = true;
                for (size_t k = l; k < dend; k++)
                    if (!is_ws(s[k])) { allws = false; break; }
                if (allws) dend = l;
            }
        }
        emit_data(p, &lc, i, dend);
        size_t k = j + 2 + (sign == '-' || sign == '+');
        if (kind == '#') {
            const char *e = NULL;
            for (size_t q = k; q + 1 < n; q++)
                if (s[q] == '#' && s[q + 1] == '}') { e = s + q; break; }
            if (!e) {
                uint32_t l, c;
                pos_linecol(p, j, &l, &c);
                perr(p, l, c, "missing end of comment tag");
            }
            size_t q = (size_t)(e - s);
            bool minus = q > k && s[q - 1] == '-';
            bool plus = q > k && s[q - 1] == '+';
            i = q + 2;
            if (minus) while (i < n && is_ws(s[i])) i++;
            else if (!plus && i < n && s[i] == '\n') i++;
            line_starting = i > 0 && s[i - 1] == '\n';
            continue;
        }
        size_t after;
        bool minus_after;
        if (kind == '%' && tag_is(s, n, j, "raw", &after, &minus_after)) {
            size_t q = after;
            if (minus_after) while (q < n && is_ws(q < n ? s[q] : 0)) q++;
            size_t e = q, ea = 0;
            bool em = false;
            for (; e + 1 < n; e++)
                if (s[e] == '{' && s[e + 1] == '%' && tag_is(s, n, e, "endraw", &ea, &em)) break;
            if (e + 1 >= n) {
                uint32_t l, c;
                pos_linecol(p, j, &l, &c);
                perr(p, l, c, "missing endraw tag");
            }
            size_t de = e;
            if (e + 2 < n && s[e + 2] == '-') while (de > q && is_ws(s[de - 1])) de--;
            emit_data(p, &lc, q, de);
            i = ea;
            if (em) while (i < n && is_ws(s[i])) i++;
            else if (i < n && s[i] == '\n') i++;
            line_starting = i > 0 && s[i - 1] == '\n';
            continue;
        }
        push_tok(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, &lc, j);
        bool strip_after, keep_after;
        lex_tag(p, &k, kind == '%', &lc, &strip_after, &keep_after);
        i = k;
        if (strip_after) while (i < n && is_ws(s[i])) i++;
        else if (kind == '%' && !keep_after && i < n && s[i] == '\n') i++;
        line_starting = i > 0 && s[i - 1] == '\n';
    }
    push_tok(p, T_EOF, &lc, n);
}

/* ====================================================================
 * Parser
 * ==================================================================== */

static jtok *cur(jparser *p) { return &p->toks[p->cur]; }
static jtok *peek(jparser *p, size_t k)
{
    size_t i = p->cur + k;
    return &p->toks[i < p->ntok ? i : p->ntok - 1];
}
static void next_tok(jparser *p) { if (p->cur + 1 < p->ntok) p->cur++; }

static bool is_op(const jtok *t, const char *op) { return t->type == T_OP && strcmp(t->op, op) == 0; }
static bool is_name(const jtok *t, const char *nm)
{
    return t->type == T_NAME && t->n == strlen(nm) && memcmp(t->s, nm, t->n) == 0;
}

static const char *tok_desc(const jtok *t, char *buf, size_t cap)
{
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_BLOCK_END: return "end of statement block";
    case T_VAR_END: return "end of print statement";
    case T_NAME: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_OP: snprintf(buf, cap, "'%s'", t->op); return buf;
    default: return "template data";
    }
}

static void __attribute__((noreturn)) unexpected(jparser *p, const char *expected)
{
    char b[64];
    jtok *t = cur(p);
    if (expected)
        perr(p, t->line, t->col, "expected %s, got %s", expected, tok_desc(t, b, sizeof b));
    perr(p, t->line, t->col, "unexpected %s", tok_desc(t, b, sizeof b));
}

static void expect_op(jparser *p, const char *op)
{
    if (!is_op(cur(p), op)) {
        char e[16];
        snprintf(e, sizeof e, "'%s'", op);
        unexpected(p, e);
    }
    next_tok(p);
}

static const char *expect_name(jparser *p)
{
    jtok *t = cur(p);
    if (t->type != T_NAME) unexpected(p, "a name");
    next_tok(p);
    return ja_strndup(p->ar, t->s, t->n);
}

static jnode *mk(jparser *p, int kind, const jtok *at)
{
    jnode *nd = ja_alloc(p->ar, sizeof *nd);
    nd->kind = (uint8_t)kind;
    nd->line = at->line;
    nd->col = at->col;
    return nd;
}

/* Growable node arrays built in the arena. */
typedef struct { jnode **a; size_t n, cap; } nvec;
static void nv_push(jparser *p, nvec *v, jnode *x)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        jnode **na = ja_alloc(p->ar, nc * sizeof *na);
        if (v->n) memcpy(na, v->a, v->n * sizeof *na);
        v->a = na;
        v->cap = nc;
    }
    v->a[v->n++] = x;
}
typedef struct { const char **a; size_t n, cap; } svec;
static void sv_push(jparser *p, svec *v, const char *x)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        const char **na = ja_alloc(p->ar, nc * sizeof *na);
        if (v->n) memcpy(na, v->a, v->n * sizeof *na);
        v->a = na;
        v->cap = nc;
    }
    v->a[v->n++] = x;
}

static void enter(jparser *p)
{
    if (++p->depth > JINJA_MAX_PARSE_DEPTH) {
        jtok *t = cur(p);
        perr(p, t->line, t->col, "template nested too deeply (more than %d levels)", JINJA_MAX_PARSE_DEPTH);
    }
}
static void leave(jparser *p) { p->depth--; }

static jnode *parse_expr(jparser *p, bool with_cond);
static jnode *parse_unary(jparser *p, bool with_filter);
static jnode *parse_primary(jparser *p);
static jnode *parse_postfix(jparser *p, jnode *nd);

/* (args, kw=args) after the '(' */
static void parse_call_args(jparser *p, jnode *nd)
{
    nvec args = {0}, kwv = {0};
    svec kwn = {0};
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (args.n + kwv.n) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        if (is_op(cur(p), "*")) {
            jtok *t = cur(p);
            perr(p, t->line, t->col, "*args and **kwargs in calls are not supported");
        }
        if (cur(p)->type == T_NAME && is_op(peek(p, 1), "=")) {
            sv_push(p, &kwn, expect_name(p));
            next_tok(p);
            nv_push(p, &kwv, parse_expr(p, true));
        } else {
            if (kwv.n) unexpected(p, "a keyword argument");
            nv_push(p, &args, parse_expr(p, true));
        }
    }
    next_tok(p);
    nd->args = args.a; nd->nargs = args.n;
    nd->kwn = kwn.a; nd->kwv = kwv.a; nd->nkw = kwv.n;
}

static jnode *parse_tuple(jparser *p, bool with_cond, bool explicit_parens, jtok *at)
{
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n) {
            if (!is_op(cur(p), ",")) break;
            next_tok(p);
            is_tuple = true;
        }
        jtok *t = cur(p);
        if (t->type == T_BLOCK_END || t->type == T_VAR_END || is_op(t, ")") ||
            (!explicit_parens && is_name(t, "in")))
            break;
        nv_push(p, &items, parse_expr(p, with_cond));
    }
    if (!is_tuple) {
        if (items.n == 1) return items.a[0];
        if (!explicit_parens) unexpected(p, "an expression");
    }
    jnode *nd = mk(p, JN_TUPLE, at);
    nd->args = items.a;
    nd->nargs = items.n;
    return nd;
}

static jnode *parse_primary(jparser *p)
{
    jtok *t = cur(p);
    jnode *nd;
    enter(p);
    switch (t->type) {
    case T_NAME:
        nd = mk(p, JN_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) nd->lit = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) nd->lit = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) nd->lit = jv_none();
        else {
            nd->kind = JN_NAME;
            nd->lit = jv_strn(ja_strndup(p->ar, t->s, t->n), t->n);
        }
        next_tok(p);
        break;
    case T_STRING: {
        /* adjacent literals concatenate */
        size_t total = 0, k = 0;
        while (peek(p, k)->type == T_STRING) total += peek(p, k++)->n;
        char *buf = ja_alloc(p->ar, total + 1);
        size_t o = 0;
        nd = mk(p, JN_LIT, t);
        while (cur(p)->type == T_STRING) {
            memcpy(buf + o, cur(p)->s, cur(p)->n);
            o += cur(p)->n;
            next_tok(p);
        }
        nd->lit = jv_strn(buf, o);
        break;
    }
    case T_INT:
        nd = mk(p, JN_LIT, t);
        nd->lit = jv_int(t->i);
        next_tok(p);
        break;
    case T_FLOAT:
        nd = mk(p, JN_LIT, t);
        nd->lit = jv_float(t->f);
        next_tok(p);
        break;
    case T_OP:
        if (is_op(t, "(")) {
            next_tok(p);
            nd = parse_tuple(p, true, true, t);
            expect_op(p, ")");
            break;
        }
        if (is_op(t, "[")) {
            nvec items = {0};
            next_tok(p);
            while (!is_op(cur(p), "]")) {
                if (items.n) expect_op(p, ",");
                if (is_op(cur(p), "]")) break;
                nv_push(p, &items, parse_expr(p, true));
            }
            next_tok(p);
            nd = mk(p, JN_LIST, t);
            nd->args = items.a;
            nd->nargs = items.n;
            break;
        }
        if (is_op(t, "{")) {
            nvec keys = {0}, vals = {0};
            next_tok(p);
            while (!is_op(cur(p), "}")) {
                if (keys.n) expect_op(p, ",");
                if (is_op(cur(p), "}")) break;
                nv_push(p, &keys, parse_expr(p, true));
                expect_op(p, ":");
                nv_push(p, &vals, parse_expr(p, true));
            }
            next_tok(p);
            nd = mk(p, JN_DICT, t);
            nd->args = keys.a;
            nd->kwv = vals.a;
            nd->nargs = nd->nkw = keys.n;
            break;
        }
        /* fall through */
    default:
        unexpected(p, NULL);
    }
    leave(p);
    return nd;
}

static jnode *parse_subscript_part(jparser *p)
{
    jtok *at = cur(p);
    jnode *parts[3] = {NULL, NULL, NULL};
    bool slice = false;
    if (!is_op(cur(p), ":")) {
        parts[0] = parse_expr(p, true);
        if (!is_op(cur(p), ":")) return parts[0];
    }
    slice = true;
    next_tok(p);  /* ':' */
    if (!is_op(cur(p), "]") && !is_op(cur(p), ":") && !is_op(cur(p), ","))
        parts[1] = parse_expr(p, true);
    if (is_op(cur(p), ":")) {
        next_tok(p);
        if (!is_op(cur(p), "]") && !is_op(cur(p), ","))
            parts[2] = parse_expr(p, true);
    }
    (void)slice;
    jnode *nd = mk(p, JN_SLICE, at);
    nd->a = parts[0]; nd->b = parts[1]; nd->c = parts[2];
    return nd;
}

static jnode *parse_postfix(jparser *p, jnode *nd)
{
    for (;;) {
        jtok *t = cur(p);
        if (is_op(t, ".")) {
            next_tok(p);
            jtok *a = cur(p);
            jnode *x = mk(p, JN_ATTR, t);
            x->a = nd;
            if (a->type == T_NAME) {
                x->lit = jv_strn(ja_strndup(p->ar, a->s, a->n), a->n);
            } else if (a->type == T_INT) {
                x->kind = JN_ITEM;
                x->b = mk(p, JN_LIT, a);
                x->b->lit = jv_int(a->i);
            } else {
                unexpected(p, "an attribute name");
            }
            next_tok(p);
            nd = x;
        } else if (is_op(t, "[")) {
            next_tok(p);
            enter(p);
            jnode *x = mk(p, JN_ITEM, t);
            x->a = nd;
            x->b = parse_subscript_part(p);
            if (is_op(cur(p), ",")) {
                jtok *c = cur(p);
                perr(p, c->line, c->col, "tuple subscripts are not supported");
            }
            expect_op(p, "]");
            leave(p);
            nd = x;
        } else if (is_op(t, "(")) {
            enter(p);
            jnode *x = mk(p, JN_CALL, t);
            x->a = nd;
            parse_call_args(p, x);
            leave(p);
            nd = x;
        } else {
            return nd;
        }
    }
}

static jnode *parse_filter(jparser *p, jnode *nd, jtok *at)
{
    jtok *nt = cur(p);
    const char *name = expect_name(p);
    /* dotted filter names are jinja2 syntax too; none of ours have dots */
    int id = jinja_filter_id(name, strlen(name));
    if (id < 0) perr(p, nt->line, nt->col, "no filter named '%s'", name);
    jnode *x = mk(p, JN_FILTER, at);
    x->a = nd;
    x->id = (uint16_t)id;
    x->lit = jv_strn(name, strlen(name));
    if (is_op(cur(p), "(")) parse_call_args(p, x);
    return x;
}

static jnode *parse_filter_expr(jparser *p, jnode *nd)
{
    for (;;) {
        jtok *t = cur(p);
        if (is_op(t, "|")) {
            next_tok(p);
            enter(p);
            nd = parse_filter(p, nd, t);
            leave(p);
        } else if (is_name(t, "is")) {
            next_tok(p);
            enter(p);
            jnode *x = mk(p, JN_TEST, t);
            x->a = nd;
            if (is_name(cur(p), "not")) { x->op = 1; next_tok(p); }
            jtok *nt = cur(p);
            const char *name = expect_name(p);
            int id = jinja_test_id(name, strlen(name));
            if (id < 0) perr(p, nt->line, nt->col, "no test named '%s'", name);
            x->id = (uint16_t)id;
            x->lit = jv_strn(name, strlen(name));
            jtok *c = cur(p);
            if (is_op(c, "(")) {
                parse_call_args(p, x);
            } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
                        c->type == T_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) perr(p, c->line, c->col, "you cannot chain multiple tests with is");
                jnode *arg = parse_postfix(p, parse_primary(p));
                x->args = ja_alloc(p->ar, sizeof *x->args);
                x->args[0] = arg;
                x->nargs = 1;
            }
            leave(p);
            nd = x;
        } else if (is_op(t, "(")) {
            nd = parse_postfix(p, nd);
        } else {
            return nd;
        }
    }
}

static jnode *parse_unary(jparser *p, bool with_filter)
{
    jtok *t = cur(p);
    jnode *nd;
    enter(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        next_tok(p);
        nd = mk(p, is_op(t, "-") ? JN_NEG : JN_POS, t);
        nd->a = parse_unary(p, false);
    } else {
        nd = parse_primary(p);
    }
    nd = parse_postfix(p, nd);
    if (with_filter) nd = parse_filter_expr(p, nd);
    leave(p);
    return nd;
}

static jnode *mkbin(jparser *p, int kind, int op, jnode *l, jnode *r, jtok *at)
{
    jnode *x = mk(p, kind, at);
    x->op = (uint8_t)op;
    x->a = l;
    x->b = r;
    return x;
}

static jnode *parse_pow(jparser *p)
{
    jnode *l = parse_unary(p, true);
    while (is_op(cur(p), "**")) {
        jtok *t = cur(p);
        next_tok(p);
        l = mkbin(p, JN_BIN, JOP_POW, l, parse_unary(p, true), t);
    }
    return l;
}

static jnode *parse_math2(jparser *p)
{
    jnode *l = parse_pow(p);
    for (;;) {
        jtok *t = cur(p);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FDIV
               : is_op(t, "%") ? JOP_MOD : -1;
        if (op < 0) return l;
        next_tok(p);
        l = mkbin(p, JN_BIN, op, l, parse_pow(p), t);
    }
}

static jnode *parse_concat(jparser *p)
{
    jnode *l = parse_math2(p);
    while (is_op(cur(p), "~")) {
        jtok *t = cur(p);
        next_tok(p);
        l = mkbin(p, JN_BIN, JOP_CAT, l, parse_math2(p), t);
    }
    return l;
}

static jnode *parse_math1(jparser *p)
{
    jnode *l = parse_concat(p);
    for (;;) {
        jtok *t = cur(p);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : -1;
        if (op < 0) return l;
        next_tok(p);
        l = mkbin(p, JN_BIN, op, l, parse_concat(p), t);
    }
}

static jnode *parse_compare(jparser *p)
{
    jtok *at = cur(p);
    jnode *first = parse_math1(p);
    nvec ops = {0};
    uint8_t opv[64];
    for (;;) {
        jtok *t = cur(p);
        int op = -1;
        if (is_op(t, "==")) op = JOP_EQ;
        else if (is_op(t, "!=")) op = JOP_NE;
        else if (is_op(t, "<")) op = JOP_LT;
        else if (is_op(t, "<=")) op = JOP_LE;
        else if (is_op(t, ">")) op = JOP_GT;
        else if (is_op(t, ">=")) op = JOP_GE;
        else if (is_name(t, "in")) op = JOP_IN;
        else if (is_name(t, "not") && is_name(peek(p, 1), "in")) { op = JOP_NOTIN; next_tok(p); }
        if (op < 0) break;
        if (ops.n == sizeof opv) perr(p, t->line, t->col, "too many chained comparisons");
        next_tok(p);
        opv[ops.n] = (uint8_t)op;
        nv_push(p, &ops, parse_math1(p));
    }
    if (!ops.n) return first;
    jnode *x = mk(p, JN_CMP, at);
    x->a = first;
    x->args = ops.a;
    x->nargs = ops.n;
    x->ops = ja_alloc(p->ar, ops.n);
    memcpy(x->ops, opv, ops.n);
    return x;
}

static jnode *parse_not(jparser *p)
{
    jtok *t = cur(p);
    if (is_name(t, "not")) {
        next_tok(p);
        enter(p);
        jnode *x = mk(p, JN_NOT, t);
        x->a = parse_not(p);
        leave(p);
        return x;
    }
    return parse_compare(p);
}

static jnode *parse_and(jparser *p)
{
    jnode *l = parse_not(p);
    while (is_name(cur(p), "and")) {
        jtok *t = cur(p);
        next_tok(p);
        l = mkbin(p, JN_AND, 0, l, parse_not(p), t);
    }
    return l;
}

static jnode *parse_or(jparser *p)
{
    jnode *l = parse_and(p);
    while (is_name(cur(p), "or")) {
        jtok *t = cur(p);
        next_tok(p);
        l = mkbin(p, JN_OR, 0, l, parse_and(p), t);
    }
    return l;
}

static jnode *parse_expr(jparser *p, bool with_cond)
{
    enter(p);
    jnode *e = parse_or(p);
    while (with_cond && is_name(cur(p), "if")) {
        jtok *t = cur(p);
        next_tok(p);
        jnode *x = mk(p, JN_COND, t);
        x->a = e;
        x->b = parse_or(p);
        if (is_name(cur(p), "else")) {
            next_tok(p);
            x->c = parse_expr(p, true);
        }
        e = x;
    }
    leave(p);
    return e;
}

/* ---------------------------------------------------------------- statements */

static void parse_body(jparser *p, nvec *out, const char *const *ends);

static void expect_block_end(jparser *p)
{
    if (cur(p)->type != T_BLOCK_END) unexpected(p, "end of statement block");
    next_tok(p);
}

/* Parse statements until a block tag whose name is one of `ends`; leaves
 * the parser on that name. */
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};

static void sv_name_targets(jparser *p, svec *names)
{
    bool paren = is_op(cur(p), "(");
    if (paren) next_tok(p);
    for (;;) {
        sv_push(p, names, expect_name(p));
        if (!is_op(cur(p), ",")) break;
        next_tok(p);
        if (paren && is_op(cur(p), ")")) break;
    }
    if (paren) expect_op(p, ")");
}

static jnode *parse_if(jparser *p, jtok *at)
{
    jnode *x = mk(p, JN_IF, at);
    x->a = parse_expr(p, true);
    expect_block_end(p);
    nvec body = {0};
    parse_body(p, &body, END_IF);
    x->body = body.a;
    x->nbody = body.n;
    jtok *t = cur(p);
    if (is_name(t, "elif")) {
        next_tok(p);
        enter(p);
        jnode *e = parse_if(p, t);
        leave(p);
        x->body2 = ja_alloc(p->ar, sizeof *x->body2);
        x->body2[0] = e;
        x->nbody2 = 1;
        return x;   /* the nested if consumed endif */
    }
    if (is_name(t, "else")) {
        next_tok(p);
        expect_block_end(p);
        nvec eb = {0};
        static const char *const E[] = {"endif", NULL};
        parse_body(p, &eb, E);
        x->body2 = eb.a;
        x->nbody2 = eb.n;
    }
    next_tok(p);   /* endif */
    expect_block_end(p);
    return x;
}

static jnode *parse_for(jparser *p, jtok *at)
{
    jnode *x = mk(p, JN_FOR, at);
    svec names = {0};
    sv_name_targets(p, &names);
    x->names = names.a;
    x->nnames = names.n;
    if (!is_name(cur(p), "in")) unexpected(p, "'in'");
    next_tok(p);
    x->a = parse_tuple(p, false, false, cur(p));
    if (is_name(cur(p), "if")) {
        next_tok(p);
        x->b = parse_expr(p, true);
    }
    if (is_name(cur(p), "recursive")) {
        jtok *t = cur(p);
        perr(p, t->line, t->col, "recursive loops are not supported");
    }
    expect_block_end(p);
    nvec body = {0};
    parse_body(p, &body, END_FOR);
    x->body = body.a;
    x->nbody = body.n;
    if (is_name(cur(p), "else")) {
        next_tok(p);
        expect_block_end(p);
        nvec eb = {0};
        parse_body(p, &eb, END_FOR2);
        x->body2 = eb.a;
        x->nbody2 = eb.n;
        x->op = 1;
    }
    next_tok(p);
    expect_block_end(p);
    return x;
}

static jnode *parse_set(jparser *p, jtok *at)
{
    jnode *x = mk(p, JN_SET, at);
    svec names = {0};
    /* ns.attr target */
    if (cur(p)->type == T_NAME && is_op(peek(p, 1), ".")) {
        sv_push(p, &names, expect_name(p));
        next_tok(p);
        x->lit = jv_strn(expect_name(p), 0);
        x->lit.n = strlen(x->lit.s);
        x->op = 1;
    } else {
        sv_name_targets(p, &names);
    }
    x->names = names.a;
    x->nnames = names.n;
    if (is_op(cur(p), "=")) {
        next_tok(p);
        x->a = parse_tuple(p, true, false, cur(p));
        expect_block_end(p);
        return x;
    }
    /* block set: {% set x %}...{% endset %}, optionally with filters */
    if (x->op || names.n != 1) unexpected(p, "'='");
    x->kind = JN_SETBLOCK;
    jnode *f = NULL;
    while (is_op(cur(p), "|")) {
        jtok *t = cur(p);
        next_tok(p);
        f = parse_filter(p, f, t);
    }
    x->b = f;   /* chain of filters whose innermost input is NULL */
    expect_block_end(p);
    nvec body = {0};
    static const char *const E[] = {"endset", NULL};
    parse_body(p, &body, E);
    x->body = body.a;
    x->nbody = body.n;
    next_tok(p);
    expect_block_end(p);
    return x;
}

/* macro parameters: (a, b=default, ...) */
static void parse_params(jparser *p, jnode *x)
{
    svec names = {0};
    nvec defs = {0};
    bool seen_default = false;
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (names.n) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        sv_push(p, &names, expect_name(p));
        if (is_op(cur(p), "=")) {
            next_tok(p);
            nv_push(p, &defs, parse_expr(p, true));
            seen_default = true;
        } else {
            if (seen_default) unexpected(p, "'=' (non-default argument follows default argument)");
            nv_push(p, &defs, NULL);
        }
    }
    next_tok(p);
    x->names = names.a;
    x->nnames = names.n;
    x->kwv = defs.a;   /* one per name; NULL when required */
    x->nkw = defs.n;
}

static jnode *parse_statement(jparser *p)
{
    jtok *open = cur(p);
    next_tok(p);   /* T_BLOCK_BEGIN */
    jtok *t = cur(p);
    if (t->type != T_NAME) unexpected(p, "a statement name");
    next_tok(p);
    jnode *x;
    enter(p);
    if (is_name(t, "if")) {
        x = parse_if(p, t);
    } else if (is_name(t, "for")) {
        x = parse_for(p, t);
    } else if (is_name(t, "set")) {
        x = parse_set(p, t);
    } else if (is_name(t, "macro")) {
        x = mk(p, JN_MACRO, t);
        const char *name = expect_name(p);
        x->lit = jv_strn(name, strlen(name));
        parse_params(p, x);
        expect_block_end(p);
        nvec body = {0};
        static const char *const E[] = {"endmacro", NULL};
        parse_body(p, &body, E);
        x->body = body.a;
        x->nbody = body.n;
        next_tok(p);
        if (cur(p)->type == T_NAME) next_tok(p);   /* {% endmacro name %} */
        expect_block_end(p);
    } else if (is_name(t, "call")) {
        x = mk(p, JN_CALLBLOCK, t);
        x->lit = jv_strn("caller", 6);
        if (is_op(cur(p), "(")) parse_params(p, x);
        jnode *call = parse_expr(p, true);
        if (call->kind != JN_CALL) perr(p, t->line, t->col, "expected call");
        x->a = call;
        expect_block_end(p);
        nvec body = {0};
        static const char *const E[] = {"endcall", NULL};
        parse_body(p, &body, E);
        x->body = body.a;
        x->nbody = body.n;
        next_tok(p);
        expect_block_end(p);
    } else if (is_name(t, "filter")) {
        x = mk(p, JN_FILTERBLOCK, t);
        jnode *f = parse_filter(p, NULL, t);
        while (is_op(cur(p), "|")) {
            jtok *b = cur(p);
            next_tok(p);
            f = parse_filter(p, f, b);
        }
        x->b = f;
        expect_block_end(p);
        nvec body = {0};
        static const char *const E[] = {"endfilter", NULL};
        parse_body(p, &body, E);
        x->body = body.a;
        x->nbody = body.n;
        next_tok(p);
        expect_block_end(p);
    } else if (is_name(t, "generation")) {
        /* transformers' AssistantTracker: marks assistant text, renders as is */
        x = mk(p, JN_GENERATION, t);
        expect_block_end(p);
        nvec body = {0};
        static const char *const E[] = {"endgeneration", NULL};
        parse_body(p, &body, E);
        x->body = body.a;
        x->nbody = body.n;
        next_tok(p);
        expect_block_end(p);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        x = mk(p, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, t);
        expect_block_end(p);
    } else {
        static const char *const unsup[] = {"include", "import", "from", "extends", "block",
                                            "with", "autoescape", "do", NULL};
        for (int k = 0; unsup[k]; k++)
            if (is_name(t, unsup[k]))
                perr(p, t->line, t->col, "the '%s' tag is not supported", unsup[k]);
        perr(p, t->line, t->col, "encountered unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    }
    (void)open;
    leave(p);
    return x;
}

static void parse_body(jparser *p, nvec *out, const char *const *ends)
{
    for (;;) {
        jtok *t = cur(p);
        if (t->type == T_EOF) {
            if (ends) {
                char exp[80] = "";
                for (int k = 0; ends[k]; k++) {
                    strncat(exp, k ? " or '" : "'", sizeof exp - strlen(exp) - 1);
                    strncat(exp, ends[k], sizeof exp - strlen(exp) - 1);
                    strncat(exp, "'", sizeof exp - strlen(exp) - 1);
                }
                perr(p, t->line, t->col, "unexpected end of template, expected %s", exp);
            }
            return;
        }
        if (t->type == T_DATA) {
            jnode *x = mk(p, JN_TEXT, t);
            x->lit = jv_strn(t->s, t->n);
            nv_push(p, out, x);
            next_tok(p);
        } else if (t->type == T_VAR_BEGIN) {
            next_tok(p);
            jnode *x = mk(p, JN_PRINT, t);
            x->a = parse_tuple(p, true, false, cur(p));
            if (cur(p)->type != T_VAR_END) unexpected(p, "end of print statement");
            next_tok(p);
            nv_push(p, out, x);
        } else if (t->type == T_BLOCK_BEGIN) {
            jtok *nm = peek(p, 1);
            if (nm->type == T_NAME && ends) {
                for (int k = 0; ends[k]; k++)
                    if (is_name(nm, ends[k])) { next_tok(p); return; }
            }
            static const char *const closers[] = {"endif", "endfor", "endset", "endmacro", "endcall",
                                                  "endfilter", "endgeneration", "elif", "else", NULL};
            for (int k = 0; closers[k]; k++)
                if (is_name(nm, closers[k]))
                    perr(p, nm->line, nm->col, "unexpected '%s'", closers[k]);
            nv_push(p, out, parse_statement(p));
        } else {
            unexpected(p, NULL);
        }
    }
}

/* ====================================================================
 * Entry points
 * ==================================================================== */

static void parse_oom(void *ud)
{
    jparser *p = ud;
    snprintf(p->err, sizeof p->err, "%s: template too large", p->name);
    longjmp(p->jb, 2);
}

int jinja_parse(jtmpl **out, const char *src, size_t len, const char *name_arg)
{
    const char *name = name_arg ? name_arg : "template";
    *out = NULL;
    jtmpl *t = calloc(1, sizeof *t);
    if (!t) return rvl_seterr(RVL_ENOMEM, "%s: out of memory", name);
    t->ar.cap = (size_t)256 << 20;
    t->name = strdup(name);
    if (!t->name) {
        free(t);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", name);
    }
    jparser *p = calloc(1, sizeof *p);
    if (!p) {
        jinja_free(t);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", name);
    }
    p->ar = &t->ar;
    p->name = t->name;
    t->ar.oom = &p->jb;
    t->ar.on_oom = parse_oom;
    t->ar.ud = p;
    int rc = setjmp(p->jb);
    if (rc) {
        int code = rc == 2 ? RVL_ERANGE : RVL_EFORMAT;
        rvl_seterr(code, "%s", p->err);
        free(p);
        jinja_free(t);
        return code;
    }
    if (len > ((size_t)64 << 20)) {
        snprintf(p->err, sizeof p->err, "%s: template larger than 64 MiB", t->name);
        longjmp(p->jb, 2);
    }
    /* newlines to "\n", then drop one trailing newline (keep_trailing_newline=False) */
    char *s = ja_alloc(&t->ar, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    p->src = s;
    p->len = n;
    lex(p);
    nvec body = {0};
    parse_body(p, &body, NULL);
    t->body = body.a;
    t->nbody = body.n;
    t->ar.oom = NULL;
    t->ar.on_oom = NULL;
    free(p);
    *out = t;
    return 0;
}

void jinja_free(jtmpl *t)
{
    if (!t) return;
    ja_free(&t->ar);
    free(t->name);
    free(t);
}
