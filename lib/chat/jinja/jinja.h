/*
 * jinja.h - the chat-template engine: a Jinja2 subset rendering like
 * Python's jinja2 under transformers' settings (ImmutableSandboxedEnvironment
 * with trim_blocks, lstrip_blocks and loopcontrols; tojson as
 * json.dumps(ensure_ascii=False); raise_exception and strftime_now
 * globals). Internal to lib/: the public API is rvl_chat_tmpl_* in
 * ruvllm.h (lib/chat/chat.c).
 *
 * Memory: a template owns an arena holding its syntax tree; a render owns
 * another holding every value it makes, freed in one go at the end, so
 * values are plain structs shared by pointer without reference counts.
 * Errors unwind with longjmp to the entry points (jinja_parse,
 * jinja_render), which is safe because everything lives in the arenas.
 *
 * Hostile templates: the parser bounds nesting, a render bounds loop
 * iterations and element visits (one budget), recursion depth, output
 * size and total memory; exceeding any of them is an error.
 */
#ifndef RVL_JINJA_H
#define RVL_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- arena */
typedef struct jarena jarena;
struct jarena {
    struct jchunk *head;
    size_t used, cap;        /* bytes handed out so far / limit */
    jmp_buf *oom;            /* longjmp target when the limit is hit */
    void (*on_oom)(void *ud);
    void *ud;
};
void *ja_alloc(jarena *a, size_t n);              /* zeroed; never NULL (longjmp) */
char *ja_strndup(jarena *a, const char *s, size_t n);
void ja_free(jarena *a);

/* ---------------------------------------------------------------- values */
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS, JV_LOOP, JV_MACRO, JV_FUNC,
} jv_type;

/* JV_LIST flags: how Python would see the object */
enum { JL_TUPLE = 1, JL_GEN = 2 /* generator: no len, always true */,
       JL_VIEW = 4 /* dict view: len, not subscriptable */ };
/* JV_UNDEF flags: what kind of lookup failed (for the error message) */
enum { JU_NAME = 0, JU_ATTR = 1, JU_ITEM = 2, JU_PLAIN = 3 };

typedef struct jv jv;
typedef struct jkv jkv;
struct jv {
    uint8_t t;            /* jv_type */
    uint8_t flag;         /* JL_* for lists, JU_* for undefined */
    uint16_t fn;          /* JV_FUNC: builtin id */
    size_t n;             /* bytes (STR), items (LIST), pairs (DICT), name len (UNDEF) */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;    /* STR bytes (not NUL-terminated); UNDEF name */
        jv *a;            /* LIST items */
        jkv *d;           /* DICT pairs, in insertion order */
        struct jns *ns;
        struct jloop *loop;
        struct jmacro *mac;
    };
};
struct jkv { jv k, v; };
struct jns { jkv *d; size_t n, cap; };   /* namespace(): mutable */

static inline jv jv_undef(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.f = f; return v; }
static inline jv jv_strn(const char *s, size_t n) { jv v = {0}; v.t = JV_STR; v.s = s; v.n = n; return v; }
static inline jv jv_list(jv *a, size_t n) { jv v = {0}; v.t = JV_LIST; v.a = a; v.n = n; return v; }
static inline jv jv_dict(jkv *d, size_t n) { jv v = {0}; v.t = JV_DICT; v.d = d; v.n = n; return v; }

/* ---------------------------------------------------------------- syntax tree */
typedef enum {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE,
    JN_CALL, JN_FILTER, JN_TEST, JN_NEG, JN_POS, JN_NOT, JN_BIN, JN_AND, JN_OR,
    JN_CMP, JN_COND,
    /* statements */
    JN_TEXT, JN_PRINT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK,
    JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE, JN_GENERATION,
} jn_kind;

/* JN_BIN and JN_CMP operators */
enum { JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FDIV, JOP_MOD, JOP_POW, JOP_CAT,
       JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN };

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;         /* jn_kind */
    uint8_t op;           /* JOP_*; JN_TEST: negated; JN_FOR: has else */
    uint16_t id;          /* filter/test builtin id */
    uint32_t line, col;
    jv lit;               /* LIT value; NAME/ATTR/FILTER/TEST/MACRO name */
    jnode *a, *b, *c;     /* operands / condition / iterable / value */
    jnode **args; size_t nargs;      /* positional args, list items, CMP operands */
    const char **kwn; jnode **kwv; size_t nkw;  /* keyword args / dict keys+values */
    jnode **body; size_t nbody;      /* statements */
    jnode **body2; size_t nbody2;    /* else branch */
    const char **names; size_t nnames;  /* FOR/SET targets, macro params */
    uint8_t *ops;         /* JN_CMP: one operator per operand */
};

typedef struct jtmpl {
    jarena ar;
    jnode **body; size_t nbody;
    char *name;           /* for error messages */
} jtmpl;

/* ---------------------------------------------------------------- limits */
typedef struct {
    uint64_t max_ops;        /* loop iterations + macro calls + element visits */
    uint32_t max_depth;      /* nested calls / expression evaluation depth */
    size_t max_output;       /* bytes of rendered text */
    size_t max_memory;       /* bytes of the render arena */
} jlimits;
extern const jlimits JINJA_DEFAULT_LIMITS;

#define JINJA_MAX_PARSE_DEPTH 200

/* Parse a template. name is used in error messages ("NAME:LINE:COL: ...").
 * Returns 0, or a negative RVL_E* code with rvl_seterr set. owned: free
 * with jinja_free. */
int jinja_parse(jtmpl **out, const char *src, size_t len, const char *name);
void jinja_free(jtmpl *t);

/* Render with `ctx` as the top-level variables (a JV_DICT made in `ar`,
 * usually by jinja_from_json). `now`: the time strftime_now formats (UTC
 * seconds; INT64_MIN for the current local time). The output is malloc'd
 * and NUL-terminated. The caller's arena `ar` holds ctx and is used for
 * everything the render allocates; its cap is set from limits. */
int jinja_render(const jtmpl *t, jarena *ar, jv ctx, int64_t now,
                 const jlimits *lim, char **out, size_t *out_len);

/* JSON text (cJSON) to a value in `ar`: objects keep their key order,
 * integral numbers within +-2^53 become ints. RVL_EFORMAT on bad JSON. */
int jinja_from_json(jarena *ar, const char *json, size_t len, jv *out);

/* Shared helpers (lib/chat/jinja/value.c) */
/* The render's output buffers. Not an rvl_buf (ruvllm.h), on purpose: the
 * bytes live in the render arena, because a finished buffer becomes a
 * string value by pointer (jbuf_str: no copy, freed with the arena) and
 * because an error longjmps out of any depth of the evaluator, past the
 * frames that hold buffers: a malloc'd buffer there would leak. Growing
 * past max (the output limit) or the arena's cap longjmps to jb too. */
typedef struct jbuf { jarena *ar; char *p; size_t n, cap, max; jmp_buf *jb; } jbuf;
void jb_put(jbuf *b, const char *s, size_t n);
void jb_putc(jbuf *b, char c);
void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jv_fmt_float(char *buf, size_t cap, double f);    /* Python repr(float) */
bool jv_equal(const jv *a, const jv *b);
size_t utf8_count(const char *s, size_t n);               /* code points */
uint32_t utf8_next(const char *s, size_t n, size_t *i);   /* decode at *i, advance */
bool py_isspace(uint32_t cp);                             /* str.isspace() */

#endif
