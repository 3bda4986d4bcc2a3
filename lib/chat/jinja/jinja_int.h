/*
 * jinja_int.h - render state shared by jinja_eval.c and jinja_builtins.c.
 */
#ifndef RVL_JINJA_INT_H
#define RVL_JINJA_INT_H

#include "chat/jinja/jinja.h"

typedef struct jscope jscope;
struct jscope {
    jscope *parent;
    jkv *v;
    size_t n, cap;
};

typedef struct jloop {
    jv *items;
    size_t n, i;
    int64_t depth0;
} jloop;

typedef struct jmacro {
    const jnode *def;     /* JN_MACRO, or JN_CALLBLOCK for caller() */
    jscope *closure;
} jmacro;

typedef struct {
    jv *pos; size_t npos;
    const char *const *kwn; jv *kwv; size_t nkw;
} jargs;

enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

typedef struct jr {
    jarena *ar;
    jmp_buf jb;
    char err[512];
    const char *name;
    jlimits lim;
    uint64_t ops_left;
    uint32_t depth, call_depth, line;
    int flow;
    bool limit;           /* the error is a render limit (RVL_ERANGE) */
    int64_t now;
} jr;

/* jinja_eval.c */
void jfail(jr *r, const jnode *at, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
void jfail_undef(jr *r, const jnode *at, const jv *u) __attribute__((noreturn));
void jcharge(jr *r, uint64_t cost);
const char *jv_typename(const jv *v);
jv jstr_cat(jr *r, const char *a, size_t na, const char *b, size_t nb);
void jbuf_init(jr *r, jbuf *b);
jv jbuf_str(jbuf *b);
void jv_write(jr *r, jbuf *b, const jv *v, bool repr, int depth);
jv jv_tostr(jr *r, const jv *v);
bool jv_truthy(const jv *v);
bool jv_eq(jr *r, const jv *a, const jv *b, int depth);
int jv_cmp(jr *r, const jnode *at, const jv *a, const jv *b, int depth);
const jv *jdict_get(jr *r, const jv *d, const jv *k);
size_t *jstr_offsets(jr *r, const jv *s, size_t *ncp);
jv jv_iter(jr *r, const jnode *at, const jv *v);
jv jv_getattr(jr *r, const jnode *at, const jv *o, const char *name, size_t n);
jv jv_getitem(jr *r, const jnode *at, const jv *o, const jv *k);
jv jv_slice(jr *r, const jnode *at, const jv *o, const jv *st, const jv *sp, const jv *sk);
jv jv_binop(jr *r, const jnode *at, int op, const jv *a, const jv *b);
jv jeval(jr *r, const jnode *nd, jscope *sc);
jv jeval_filter(jr *r, const jnode *nd, jscope *sc, const jv *base);
jv jcall_value(jr *r, const jnode *at, const jv *callee, const jargs *a, const jmacro *caller);
jv jcall_macro(jr *r, const jnode *at, const jmacro *m, const jargs *a, const jmacro *caller);
void scope_set(jr *r, jscope *s, const char *name, size_t n, jv v);

/* jinja_builtins.c */
jv japply_filter(jr *r, const jnode *at, int id, const jv *in, const jargs *a);
bool japply_test(jr *r, const jnode *at, int id, const jv *v, const jargs *a);
/* Method call obj.name(args) on str, dict, list and loop values; false
 * when `name` is not a method of that type. */
bool jcall_method(jr *r, const jnode *at, const jv *obj, const char *name, size_t n,
                  const jargs *a, jv *res);
jv jcall_builtin(jr *r, const jnode *at, int fn, const jargs *a);
void jinja_add_globals(jr *r, jscope *globals);
jv jv_percent_format(jr *r, const jnode *at, const jv *fmt, const jv *args);
int jinja_filter_id(const char *name, size_t n);
int jinja_test_id(const char *name, size_t n);

#endif
