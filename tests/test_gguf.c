/*
 * test_gguf.c - GGUF reader and writer.
 *
 * Reader tests build GGUF images in memory with a small builder and parse
 * them from an exact-size heap copy (so ASan sees any over-read). Writer
 * tests write into a fresh temporary directory and read the result back.
 * Real files: the vocab-only GGUFs in $RVL_SHARED_DATA/tokenizers (default ../shared/data,
 * relative to the repository root, where tests/run.sh runs the tests) and
 * the gguf-py golden in tests/fuzz/corpus/gguf/.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format_int.h"
#include "ruvllm_tools.h"

/* ======================================================================
 * In-memory GGUF builder
 * ====================================================================== */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bld;

static void b_put(bld *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void b_u8(bld *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(bld *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(bld *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(bld *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_header(bld *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_key(bld *b, const char *k, uint32_t vtype) { b_str(b, k); b_u32(b, vtype); }
static void b_kv_u32(bld *b, const char *k, uint32_t v) { b_key(b, k, RVL_GGUF_U32); b_u32(b, v); }
static void b_tensor(bld *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t offset)
{
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, offset);
}
static void b_pad(bld *b, size_t align)
{
    while (b->len % align)
        b_u8(b, 0);
}
static void b_fill(bld *b, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        b_u8(b, (uint8_t)(seed + i * 7));
}

/* Parse an exact-size copy of the first `len` bytes. The copy is kept
 * alive in *mem (views point into it); free it after rvl_gguf_free. */
static int parse_n(const bld *b, size_t len, rvl_gguf **g, uint8_t **mem)
{
    *mem = malloc(len ? len : 1);
    assert_non_null(*mem);
    memcpy(*mem, b->p, len);
    return rvl_gguf_parse(g, *mem, len, "test.gguf");
}

/* Expect a parse failure with `code` and every `needle` in the message. */
static void expect_fail(const bld *b, int code, const char *n1, const char *n2)
{
    rvl_gguf *g = (rvl_gguf *)1;
    uint8_t *mem;
    int rc = parse_n(b, b->len, &g, &mem);
    if (rc != code || (n1 && !strstr(rvl_errmsg(), n1)) || (n2 && !strstr(rvl_errmsg(), n2)))
        print_error("rc %d (want %d), message: %s (want '%s' and '%s')\n", rc, code,
                    rvl_errmsg(), n1 ? n1 : "", n2 ? n2 : "");
    assert_int_equal(rc, code);
    assert_null(g);
    assert_non_null(strstr(rvl_errmsg(), "test.gguf: "));
    if (n1) assert_non_null(strstr(rvl_errmsg(), n1));
    if (n2) assert_non_null(strstr(rvl_errmsg(), n2));
    free(mem);
}

static const rvl_kv *find_kv(const rvl_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rvl_str_eq(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

/* ======================================================================
 * Reader: valid files
 * ====================================================================== */

/* One key of every scalar type, one array of every element type. */
static void build_all_types(bld *b, uint32_t version)
{
    b_header(b, version, 0, 12 + 13);
    b_key(b, "s.u8", RVL_GGUF_U8);     b_u8(b, 200);
    b_key(b, "s.i8", RVL_GGUF_I8);     b_u8(b, (uint8_t)-100);
    b_key(b, "s.u16", RVL_GGUF_U16);   { uint16_t v = 60000; b_put(b, &v, 2); }
    b_key(b, "s.i16", RVL_GGUF_I16);   { int16_t v = -30000; b_put(b, &v, 2); }
    b_key(b, "s.u32", RVL_GGUF_U32);   b_u32(b, 4000000000u);
    b_key(b, "s.i32", RVL_GGUF_I32);   b_u32(b, (uint32_t)-2000000000);
    b_key(b, "s.f32", RVL_GGUF_F32);   { float v = 0.5f; b_put(b, &v, 4); }
    b_key(b, "s.bool", RVL_GGUF_BOOL); b_u8(b, 1);
    b_key(b, "s.str", RVL_GGUF_STRING); b_str(b, "hello");
    b_key(b, "s.u64", RVL_GGUF_U64);   b_u64(b, UINT64_MAX);
    b_key(b, "s.i64", RVL_GGUF_I64);   b_u64(b, (uint64_t)INT64_MIN);
    b_key(b, "s.f64", RVL_GGUF_F64);   { double v = -3.25; b_put(b, &v, 8); }

    for (uint32_t t = 0; t < RVL_GGUF_VTYPE_COUNT; t++) {
        if (t == RVL_GGUF_ARRAY) {          /* an empty u32 array instead */
            b_key(b, "a.empty", RVL_GGUF_ARRAY); b_u32(b, RVL_GGUF_U32); b_u64(b, 0);
            continue;
        }
        char key[16];
        snprintf(key, sizeof key, "a.%s", rvl_gguf_vtype_name(t));
        b_key(b, key, RVL_GGUF_ARRAY);
        b_u32(b, t);
        b_u64(b, 3);
        for (int i = 0; i < 3; i++) {
            switch (t) {
            case RVL_GGUF_STRING: b_str(b, i == 1 ? "" : i == 0 ? "x" : "yz"); break;
            case RVL_GGUF_BOOL: b_u8(b, i & 1); break;
            case RVL_GGUF_F32: { float v = 1.5f * i; b_put(b, &v, 4); break; }
            case RVL_GGUF_F64: { double v = -2.5 * i; b_put(b, &v, 8); break; }
            default: {
                uint64_t v = (uint64_t)(i + 1);
                if (t == RVL_GGUF_I8 || t == RVL_GGUF_I16 || t == RVL_GGUF_I32 ||
                    t == RVL_GGUF_I64)
                    v = (uint64_t)-(int64_t)(i + 1);
                b_put(b, &v, rvl_gguf_vtype_size(t));
            }
            }
        }
    }
}

static void check_all_types(uint32_t version)
{
    bld b = { 0 };
    rvl_gguf *g;
    uint8_t *mem;
    build_all_types(&b, version);
    assert_int_equal(parse_n(&b, b.len, &g, &mem), 0);
    assert_int_equal(g->version, version);
    assert_int_equal(g->n_kv, 25);
    assert_int_equal(g->n_tensors, 0);
    assert_int_equal(g->alignment, 32);
    assert_int_equal(g->data_offset, (b.len + 31) / 32 * 32);

    uint64_t u; int64_t i; double d; rvl_str s;
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.u8"), &u), 0);  assert_int_equal(u, 200);
    assert_int_equal(rvl_kv_get_i64(find_kv(g, "s.i8"), &i), 0);  assert_int_equal(i, -100);
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.u16"), &u), 0); assert_int_equal(u, 60000);
    assert_int_equal(rvl_kv_get_i64(find_kv(g, "s.i16"), &i), 0); assert_int_equal(i, -30000);
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.u32"), &u), 0); assert_int_equal(u, 4000000000u);
    assert_int_equal(rvl_kv_get_i64(find_kv(g, "s.i32"), &i), 0); assert_int_equal(i, -2000000000);
    assert_int_equal(rvl_kv_get_f64(find_kv(g, "s.f32"), &d), 0); assert_true(d == 0.5);
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.bool"), &u), 0); assert_int_equal(u, 1);
    assert_int_equal(rvl_kv_get_str(find_kv(g, "s.str"), &s), 0); assert_true(rvl_str_eq(s, "hello"));
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.u64"), &u), 0); assert_true(u == UINT64_MAX);
    assert_int_equal(rvl_kv_get_i64(find_kv(g, "s.i64"), &i), 0); assert_true(i == INT64_MIN);
    assert_int_equal(rvl_kv_get_f64(find_kv(g, "s.f64"), &d), 0); assert_true(d == -3.25);

    const rvl_kv *kv = find_kv(g, "s.str");
    assert_int_equal(kv->type, RVL_GGUF_STRING);
    assert_int_equal(kv->n, 1);
    assert_non_null(kv->strs);
    assert_ptr_equal(kv->data, kv->strs[0].ptr);
    assert_int_equal(find_kv(g, "s.u8")->offset, 24);   /* byte offset of the key */
    assert_int_equal(find_kv(g, "s.i8")->offset, 24 + 12 + 4 + 1);

    for (uint32_t t = 0; t < RVL_GGUF_VTYPE_COUNT; t++) {
        char key[16];
        if (t == RVL_GGUF_ARRAY) continue;
        snprintf(key, sizeof key, "a.%s", rvl_gguf_vtype_name(t));
        kv = find_kv(g, key);
        assert_non_null(kv);
        assert_int_equal(kv->type, RVL_GGUF_ARRAY);
        assert_int_equal(kv->arr_type, t);
        assert_int_equal(kv->n, 3);
        if (t == RVL_GGUF_STRING) {
            assert_true(rvl_str_eq(kv->strs[0], "x"));
            assert_true(rvl_str_eq(kv->strs[1], ""));
            assert_true(rvl_str_eq(kv->strs[2], "yz"));
            assert_true(isnan(rvl_kv_arr_f64(kv, 0)));
            continue;
        }
        for (int j = 0; j < 3; j++) {
            double want = t == RVL_GGUF_BOOL ? (j & 1) : t == RVL_GGUF_F32 ? 1.5 * j
                        : t == RVL_GGUF_F64 ? -2.5 * j
                        : (t == RVL_GGUF_I8 || t == RVL_GGUF_I16 || t == RVL_GGUF_I32 ||
                           t == RVL_GGUF_I64) ? -(j + 1) : (j + 1);
            assert_true(rvl_kv_arr_f64(kv, j) == want);
            if (t != RVL_GGUF_F32 && t != RVL_GGUF_F64)
                assert_int_equal(rvl_kv_arr_i64(kv, j), (int64_t)want);
        }
        assert_true(isnan(rvl_kv_arr_f64(kv, 3)));
        assert_int_equal(rvl_kv_arr_i64(kv, 3), 0);
    }
    kv = find_kv(g, "a.empty");
    assert_int_equal(kv->n, 0);
    assert_int_equal(kv->arr_type, RVL_GGUF_U32);
    rvl_gguf_free(g);
    free(mem);
    free(b.p);
}

static void test_gguf_parses_v3_with_every_value_type(void **state)
{
    (void)state;
    check_all_types(3);
}

static void test_gguf_parses_v2_with_every_value_type(void **state)
{
    (void)state;
    check_all_types(2);
}

static void test_gguf_parses_empty_arrays(void **state)
{
    (void)state;
    bld b = { 0 };
    rvl_gguf *g;
    uint8_t *mem;
    b_header(&b, 3, 0, 2);
    b_key(&b, "no.strings", RVL_GGUF_ARRAY); b_u32(&b, RVL_GGUF_STRING); b_u64(&b, 0);
    b_key(&b, "no.floats", RVL_GGUF_ARRAY); b_u32(&b, RVL_GGUF_F32); b_u64(&b, 0);
    assert_int_equal(parse_n(&b, b.len, &g, &mem), 0);
    assert_int_equal(g->kv[0].n, 0);
    assert_int_equal(g->kv[0].arr_type, RVL_GGUF_STRING);
    assert_int_equal(g->kv[1].n, 0);
    assert_true(isnan(rvl_kv_arr_f64(&g->kv[1], 0)));
    rvl_gguf_free(g);
    free(mem);
    free(b.p);
}

static void test_gguf_accessors_refuse_lossy_conversions(void **state)
{
    (void)state;
    bld b = { 0 };
    rvl_gguf *g;
    uint8_t *mem;
    uint64_t u; int64_t i; double d; rvl_str s;
    build_all_types(&b, 3);
    assert_int_equal(parse_n(&b, b.len, &g, &mem), 0);

    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.i8"), &u), RVL_EFORMAT);
    assert_non_null(strstr(rvl_errmsg(), "s.i8"));
    assert_int_equal(rvl_kv_get_i64(find_kv(g, "s.u64"), &i), RVL_EFORMAT);
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "s.f32"), &u), RVL_EFORMAT);
    assert_int_equal(rvl_kv_get_f64(find_kv(g, "s.str"), &d), RVL_EFORMAT);
    assert_int_equal(rvl_kv_get_str(find_kv(g, "s.u32"), &s), RVL_EFORMAT);
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "a.u32"), &u), RVL_EFORMAT);
    assert_int_equal(rvl_kv_get_str(find_kv(g, "a.string"), &s), RVL_EFORMAT);
    assert_int_equal(rvl_kv_get_u64(find_kv(g, "no.such.key"), &u), RVL_ENOTFOUND);
    assert_int_equal(rvl_kv_get_str(NULL, &s), RVL_ENOTFOUND);
    assert_int_equal(rvl_kv_get_i64(find_kv(g, "s.u32"), &i), 0);
    assert_int_equal(i, 4000000000);
    assert_int_equal(rvl_kv_get_f64(find_kv(g, "s.i64"), &d), 0);
    assert_true(d == (double)INT64_MIN);
    assert_true(isnan(rvl_kv_arr_f64(NULL, 0)));
    assert_true(rvl_str_eq((rvl_str){ "ab", 2 }, "ab"));
    assert_false(rvl_str_eq((rvl_str){ "ab", 2 }, "abc"));
    assert_false(rvl_str_eq((rvl_str){ "abc", 2 }, "abc"));
    assert_true(rvl_str_eq((rvl_str){ NULL, 0 }, ""));
    assert_string_equal(rvl_gguf_vtype_name(RVL_GGUF_STRING), "string");
    assert_string_equal(rvl_gguf_vtype_name(99), "unknown");
    assert_int_equal(rvl_gguf_vtype_size(RVL_GGUF_F64), 8);
    assert_int_equal(rvl_gguf_vtype_size(RVL_GGUF_STRING), 0);
    rvl_gguf_free(g);
    free(mem);
    free(b.p);
}

/* Two tensors (F32 [4, 3] and Q8_0 [64]) after one kv, data at the end:
 * the last byte of the file is the last byte of tensor data. */
static void build_tensors(bld *b, uint32_t align)
{
    uint64_t ne_a[2] = { 4, 3 }, ne_b[1] = { 64 };
    b_header(b, 3, 2, align == 32 ? 1 : 2);
    b_key(b, "general.architecture", RVL_GGUF_STRING);
    b_str(b, "llama");
    if (align != 32)
        b_kv_u32(b, "general.alignment", align);
    b_tensor(b, "a", 2, ne_a, RVL_TYPE_F32, 0);
    b_tensor(b, "blk.0.b", 1, ne_b, RVL_TYPE_Q8_0, (48 + align - 1) / align * align);
    b_pad(b, align);
    b_fill(b, 48, 1);
    b_pad(b, align);
    b_fill(b, 68, 2);
}

static void test_gguf_parses_tensor_infos_and_data(void **state)
{
    (void)state;
    bld b = { 0 };
    rvl_gguf *g;
    uint8_t *mem;
    build_tensors(&b, 32);
    assert_int_equal(parse_n(&b, b.len, &g, &mem), 0);
    assert_int_equal(g->n_tensors, 2);
    assert_int_equal(g->data_offset % 32, 0);

    const rvl_tensor_info *a = &g->tensors[0], *t = &g->tensors[1];
    assert_true(rvl_str_eq(a->name, "a"));
    assert_int_equal(a->type, RVL_TYPE_F32);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->ne[0], 4);
    assert_int_equal(a->ne[1], 3);
    assert_int_equal(a->ne[2], 1);
    assert_int_equal(a->ne[RVL_MAX_DIMS - 1], 1);
    assert_int_equal(a->n_elements, 12);
    assert_int_equal(a->nbytes, 48);
    assert_int_equal(a->offset, g->data_offset);           /* absolute */
    assert_ptr_equal(a->data, mem + g->data_offset);
    assert_int_equal(((const uint8_t *)a->data)[0], 1);

    assert_true(rvl_str_eq(t->name, "blk.0.b"));
    assert_int_equal(t->type, RVL_TYPE_Q8_0);
    assert_int_equal(t->n_elements, 64);
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->offset, g->data_offset + 64);
    assert_int_equal(t->offset + t->nbytes, b.len);
    assert_int_equal(((const uint8_t *)t->data)[67], (uint8_t)(2 + 67 * 7));
    rvl_gguf_free(g);
    free(mem);
    free(b.p);
}

static void test_gguf_honors_custom_alignment(void **state)
{
    (void)state;
    static const uint32_t aligns[] = { 1, 8, 64, 256 };
    for (size_t k = 0; k < sizeof aligns / sizeof *aligns; k++) {
        bld b = { 0 };
        rvl_gguf *g;
        uint8_t *mem;
        build_tensors(&b, aligns[k]);
        assert_int_equal(parse_n(&b, b.len, &g, &mem), 0);
        assert_int_equal(g->alignment, aligns[k]);
        assert_int_equal(g->data_offset % aligns[k], 0);
        assert_int_equal(g->tensors[1].offset,
                         g->data_offset + (48 + aligns[k] - 1) / aligns[k] * aligns[k]);
        rvl_gguf_free(g);
        free(mem);
        free(b.p);
    }
}

static void test_gguf_rejects_bad_alignment(void **state)
{
    (void)state;
    static const uint32_t bad[] = { 0, 3, 48, 0x80000001u };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        bld b = { 0 };
        b_header(&b, 3, 0, 1);
        b_kv_u32(&b, "general.alignment", bad[k]);
        expect_fail(&b, RVL_EFORMAT, "not a non-zero power of two", "at byte 24");
        free(b.p);
    }
    bld b = { 0 };
    b_header(&b, 3, 0, 1);
    b_key(&b, "general.alignment", RVL_GGUF_U64);
    b_u64(&b, 32);
    expect_fail(&b, RVL_EFORMAT, "general.alignment", "expected u32");
    free(b.p);
}

/* ======================================================================
 * Reader: hostile headers
 * ====================================================================== */

static void test_gguf_rejects_bad_magic(void **state)
{
    (void)state;
    bld b = { 0 };
    b_put(&b, "GGUG", 4); b_u32(&b, 3); b_u64(&b, 0); b_u64(&b, 0);
    expect_fail(&b, RVL_EFORMAT, "not a GGUF file", "byte 0");
    b.len = 2;
    expect_fail(&b, RVL_EFORMAT, "not a GGUF file", NULL);
    b.len = 0;
    expect_fail(&b, RVL_EFORMAT, "not a GGUF file", NULL);
    free(b.p);
}

static void test_gguf_rejects_v1_and_unknown_versions(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 1, 0, 0);
    expect_fail(&b, RVL_EUNSUPPORTED, "version 1", "byte 4");
    b.len = 0;
    b_header(&b, 4, 0, 0);
    expect_fail(&b, RVL_EUNSUPPORTED, "unsupported GGUF version 4", NULL);
    b.len = 0;
    b_header(&b, 0, 0, 0);
    expect_fail(&b, RVL_EUNSUPPORTED, "unsupported GGUF version 0", NULL);
    free(b.p);
}

static void test_gguf_rejects_big_endian(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, __builtin_bswap32(3), 0, 0);
    expect_fail(&b, RVL_EUNSUPPORTED, "big-endian", "version 3");
    free(b.p);
}

static void test_gguf_rejects_every_truncation(void **state)
{
    (void)state;
    bld b = { 0 };
    build_all_types(&b, 3);
    /* append two tensors so the file ends with tensor data */
    bld t = { 0 };
    build_tensors(&t, 32);
    /* splice: header counts of t, kvs of b, then t's infos/data (offsets are
     * relative, so they stay valid once re-padded) */
    bld f = { 0 };
    b_header(&f, 3, 2, 25);
    b_put(&f, b.p + 24, b.len - 24);
    uint64_t ne_a[2] = { 4, 3 }, ne_b[1] = { 64 };
    b_tensor(&f, "a", 2, ne_a, RVL_TYPE_F32, 0);
    b_tensor(&f, "blk.0.b", 1, ne_b, RVL_TYPE_Q8_0, 64);
    b_pad(&f, 32);
    b_fill(&f, 48, 1);
    b_pad(&f, 32);
    b_fill(&f, 68, 2);

    rvl_gguf *g;
    uint8_t *mem;
    assert_int_equal(parse_n(&f, f.len, &g, &mem), 0);
    rvl_gguf_free(g);
    free(mem);
    for (size_t n = 0; n < f.len; n++) {
        int rc = parse_n(&f, n, &g, &mem);
        if (rc != RVL_EFORMAT)
            print_error("prefix of %zu bytes: rc %d: %s\n", n, rc, rvl_errmsg());
        assert_int_equal(rc, RVL_EFORMAT);
        assert_null(g);
        assert_non_null(strstr(rvl_errmsg(), "test.gguf: "));
        assert_non_null(strstr(rvl_errmsg(), "byte"));
        free(mem);
    }
    free(b.p);
    free(t.p);
    free(f.p);
}

static void test_gguf_rejects_huge_counts(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, UINT64_MAX);
    b_kv_u32(&b, "a", 1);
    expect_fail(&b, RVL_EFORMAT, "18446744073709551615 metadata pairs", "byte 8");
    b.len = 0;
    b_header(&b, 3, UINT64_MAX / 16, 0);
    expect_fail(&b, RVL_EFORMAT, "tensors", "cannot fit");
    b.len = 0;
    b_header(&b, 3, 1ull << 60, 1ull << 60);
    expect_fail(&b, RVL_EFORMAT, "cannot fit", NULL);
    /* plausible counts, but the kvs use up the file before the infos */
    b.len = 0;
    b_header(&b, 3, 1, 2);
    b_kv_u32(&b, "a", 1);
    b_kv_u32(&b, "b", 1);
    b_fill(&b, 28, 0);                /* 34 + 28 >= 2 * 13 + 32, but 28 < 32 */
    expect_fail(&b, RVL_EFORMAT, "1 tensor infos cannot fit in the 28 bytes", "byte 58");
    free(b.p);
}

static void test_gguf_rejects_huge_string_length(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, 1);
    b_u64(&b, UINT64_MAX);            /* key length */
    b_u32(&b, RVL_GGUF_U8);
    b_u8(&b, 0);
    expect_fail(&b, RVL_EFORMAT, "metadata key length 18446744073709551615", "at byte 24");
    b.len = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "k", RVL_GGUF_STRING);
    b_u64(&b, 1ull << 63);
    b_fill(&b, 8, 0);
    expect_fail(&b, RVL_EFORMAT, "string value length", "at byte 37");
    free(b.p);
}

static void test_gguf_rejects_huge_array_count(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, 1);
    b_key(&b, "k", RVL_GGUF_ARRAY);
    b_u32(&b, RVL_GGUF_U64);
    b_u64(&b, (1ull << 61) + 1);      /* * 8 overflows */
    b_u64(&b, 0);
    expect_fail(&b, RVL_EFORMAT, "key 'k'", "at byte 41");
    b.len = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "tokens", RVL_GGUF_ARRAY);
    b_u32(&b, RVL_GGUF_STRING);
    b_u64(&b, 1ull << 60);
    b_str(&b, "a");
    expect_fail(&b, RVL_EFORMAT, "string array length 1152921504606846976", "key 'tokens'");
    free(b.p);
}

static void test_gguf_rejects_unknown_value_type(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, 1);
    b_key(&b, "weird", 13);
    b_u64(&b, 0);
    expect_fail(&b, RVL_EFORMAT, "unknown value type 13", "key 'weird' at byte 24");
    b.len = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "weird", RVL_GGUF_ARRAY);
    b_u32(&b, 0xffffffffu);
    b_u64(&b, 0);
    expect_fail(&b, RVL_EFORMAT, "unknown array element type 4294967295", NULL);
    free(b.p);
}

static void test_gguf_rejects_nested_arrays(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, 1);
    b_key(&b, "nest", RVL_GGUF_ARRAY);
    b_u32(&b, RVL_GGUF_ARRAY);
    b_u64(&b, 1);
    b_u32(&b, RVL_GGUF_U8);
    b_u64(&b, 1);
    b_u8(&b, 7);
    expect_fail(&b, RVL_EFORMAT, "nested arrays", "key 'nest'");
    free(b.p);
}

static void test_gguf_rejects_bad_bool(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, 1);
    b_key(&b, "flag", RVL_GGUF_BOOL);
    b_u8(&b, 2);
    expect_fail(&b, RVL_EFORMAT, "bool value 2", "at byte 40");
    b.len = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "flags", RVL_GGUF_ARRAY);
    b_u32(&b, RVL_GGUF_BOOL);
    b_u64(&b, 3);
    b_u8(&b, 0); b_u8(&b, 1); b_u8(&b, 255);
    expect_fail(&b, RVL_EFORMAT, "bool array element 2", "at byte 55");
    free(b.p);
}

static void test_gguf_rejects_duplicate_keys(void **state)
{
    (void)state;
    bld b = { 0 };
    b_header(&b, 3, 0, 3);
    b_kv_u32(&b, "a", 1);
    b_kv_u32(&b, "b", 1);
    b_kv_u32(&b, "a", 2);
    expect_fail(&b, RVL_EFORMAT, "duplicate key 'a'", "at bytes 24 and 58");
    free(b.p);
}

/* One tensor with the given shape/type/offset and `data` bytes of data. */
static void build_one(bld *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset, size_t data)
{
    b->len = 0;
    b_header(b, 3, 1, 0);
    b_tensor(b, name, n_dims, ne, type, offset);
    b_pad(b, 32);
    b_fill(b, data, 0);
}

static void test_gguf_rejects_unknown_tensor_type(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[1] = { 32 };
    build_one(&b, "blk.0.attn_q.weight", 1, ne, 4, 0, 64);      /* removed Q4_2 */
    expect_fail(&b, RVL_EFORMAT, "tensor 'blk.0.attn_q.weight'", "type id 4 at byte");
    build_one(&b, "t", 1, ne, 33, 0, 64);                         /* removed Q4_0_8_8 */
    expect_fail(&b, RVL_EFORMAT, "type id 33", NULL);
    build_one(&b, "t", 1, ne, RVL_TYPE_U8, 0, 64);                /* safetensors only */
    expect_fail(&b, RVL_EFORMAT, "type id 1000", NULL);
    build_one(&b, "t", 1, ne, 0xffffffffu, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "type id 4294967295", NULL);
    free(b.p);
}

static void test_gguf_rejects_bad_dimension_count(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[5] = { 1, 1, 1, 1, 1 };
    build_one(&b, "t", 0, ne, RVL_TYPE_F32, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "tensor 't' at byte 24 has 0 dimensions", NULL);
    build_one(&b, "t", 5, ne, RVL_TYPE_F32, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "has 5 dimensions", NULL);
    free(b.p);
}

static void test_gguf_rejects_shape_overflow(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t big[2] = { 1ull << 32, 1ull << 32 };
    build_one(&b, "t", 2, big, RVL_TYPE_I8, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "element count overflows", "tensor 't'");
    uint64_t bytes[2] = { 1ull << 31, 1ull << 31 };        /* 2^62 elements * 4 bytes */
    build_one(&b, "t", 2, bytes, RVL_TYPE_F32, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "size in bytes overflows", NULL);
    uint64_t neg[1] = { 1ull << 63 };
    build_one(&b, "t", 1, neg, RVL_TYPE_F32, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "negative", "at byte 37");
    free(b.p);
}

static void test_gguf_rejects_row_not_multiple_of_block_size(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[2] = { 48, 2 };
    build_one(&b, "q", 2, ne, RVL_TYPE_Q4_0, 0, 256);
    expect_fail(&b, RVL_EFORMAT, "row of 48 elements", "Q4_0 blocks of 32");
    free(b.p);
}

static void test_gguf_rejects_unaligned_offset(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[1] = { 4 };
    build_one(&b, "t", 1, ne, RVL_TYPE_F32, 16, 64);
    expect_fail(&b, RVL_EFORMAT, "data offset 16 is not a multiple of the alignment 32",
                "at byte 24");
    free(b.p);
}

static void test_gguf_rejects_tensor_past_eof(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[1] = { 1024 };
    build_one(&b, "blk.0.attn_q.weight", 1, ne, RVL_TYPE_F32, 0, 4095);
    char want[128];
    snprintf(want, sizeof want, "extends past end of file (size %zu) at byte 24", b.len);
    expect_fail(&b, RVL_EFORMAT, "tensor 'blk.0.attn_q.weight' data [offset 0, 4096 bytes]",
                want);
    uint64_t one[1] = { 1 };
    build_one(&b, "t", 1, one, RVL_TYPE_F32, UINT64_MAX - 31, 64);   /* offset + size wraps */
    expect_fail(&b, RVL_EFORMAT, "extends past end of file", NULL);
    free(b.p);
}

static void test_gguf_rejects_overlapping_tensors(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne16[1] = { 16 }, ne8[1] = { 8 }, ne0[1] = { 0 };
    /* c covers [0, 64); a at 32 lies inside it; listed out of order */
    b_header(&b, 3, 3, 0);
    b_tensor(&b, "a", 1, ne8, RVL_TYPE_F32, 32);
    b_tensor(&b, "c", 1, ne16, RVL_TYPE_F32, 0);
    b_tensor(&b, "z", 1, ne0, RVL_TYPE_F32, 32);      /* empty: overlaps nothing */
    b_pad(&b, 32);
    b_fill(&b, 64, 0);
    expect_fail(&b, RVL_EFORMAT, "tensor 'a' data [offset 32, 32 bytes] overlaps tensor 'c'",
                "at byte 24");
    free(b.p);

    /* the same layout without the overlap parses */
    b = (bld){ 0 };
    b_header(&b, 3, 3, 0);
    b_tensor(&b, "a", 1, ne8, RVL_TYPE_F32, 64);
    b_tensor(&b, "c", 1, ne16, RVL_TYPE_F32, 0);
    b_tensor(&b, "z", 1, ne0, RVL_TYPE_F32, 32);
    b_pad(&b, 32);
    b_fill(&b, 96, 0);
    rvl_gguf *g;
    uint8_t *mem;
    assert_int_equal(parse_n(&b, b.len, &g, &mem), 0);
    assert_int_equal(g->tensors[2].nbytes, 0);
    rvl_gguf_free(g);
    free(mem);
    free(b.p);
}

static void test_gguf_rejects_duplicate_tensor_names(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[1] = { 8 };
    b_header(&b, 3, 2, 0);
    b_tensor(&b, "output.weight", 1, ne, RVL_TYPE_F32, 0);
    b_tensor(&b, "output.weight", 1, ne, RVL_TYPE_F32, 32);
    b_pad(&b, 32);
    b_fill(&b, 64, 0);
    expect_fail(&b, RVL_EFORMAT, "duplicate tensor name 'output.weight'", "bytes 24 and 69");
    free(b.p);
}

static void test_gguf_error_names_are_printable(void **state)
{
    (void)state;
    bld b = { 0 };
    uint64_t ne[5] = { 1, 1, 1, 1, 1 };
    char name[200];
    for (size_t i = 0; i < sizeof name - 1; i++)
        name[i] = (char)(i % 3 == 0 ? '\n' : i % 3 == 1 ? '\'' : 0x80 + i % 50);
    name[sizeof name - 1] = 0;
    build_one(&b, name, 5, ne, RVL_TYPE_F32, 0, 64);
    expect_fail(&b, RVL_EFORMAT, "...' at byte 24", NULL);
    for (const char *p = rvl_errmsg(); *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
    free(b.p);
}

/* ======================================================================
 * Real files
 * ====================================================================== */

static void test_gguf_parses_real_vocab_files(void **state)
{
    (void)state;
    const char *dir = getenv("RVL_SHARED_DATA");
    char pat[4096];
    glob_t gl;
    snprintf(pat, sizeof pat, "%s/tokenizers/*.gguf", dir && *dir ? dir : "../shared/data");
    if (glob(pat, 0, NULL, &gl) != 0 || gl.gl_pathc == 0) {
        print_message("no vocab files match %s; set RVL_SHARED_DATA\n", pat);
        globfree(&gl);
        skip();
    }
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        rvl_file *f;
        int rc = rvl_file_open(&f, gl.gl_pathv[i]);
        if (rc)
            print_error("%s\n", rvl_errmsg());
        assert_int_equal(rc, 0);
        assert_int_equal(rvl_file_fmt(f), RVL_FMT_GGUF);
        assert_int_equal(rvl_file_n_tensors(f), 0);
        const rvl_kv *kv = rvl_file_find_kv(f, "tokenizer.ggml.tokens");
        assert_non_null(kv);
        assert_int_equal(kv->type, RVL_GGUF_ARRAY);
        assert_int_equal(kv->arr_type, RVL_GGUF_STRING);
        assert_true(kv->n > 1000);
        uint64_t total = 0;
        for (uint64_t j = 0; j < kv->n; j++)
            total += kv->strs[j].len;
        assert_true(total >= kv->n / 2);
        rvl_str model;
        assert_int_equal(rvl_kv_get_str(rvl_file_find_kv(f, "tokenizer.ggml.model"), &model), 0);
        assert_true(model.len > 0);
        rvl_file_close(f);
    }
    globfree(&gl);
}

/* ======================================================================
 * Writer
 * ====================================================================== */

static char tmpdir[4096];

static int setup_tmpdir(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/rvl-test-gguf-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[8192];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
    }
    if (d) closedir(d);
    return rmdir(tmpdir);
}

static const char *tpath(const char *name)
{
    static char p[8192];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static int dir_entries(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(n ? (size_t)n : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return p;
}

static uint8_t *pattern(size_t n, int k)
{
    uint8_t *p = malloc(n);
    for (size_t j = 0; j < n; j++)
        p[j] = (uint8_t)(j * 31 + k * 17 + 5);
    return p;
}

/* A kv built by hand for the scalar types that have no kv_* function. */
static rvl_kv mkkv(const char *key, uint32_t type, const void *data)
{
    return (rvl_kv){ .key = { key, strlen(key) }, .type = type, .n = 1, .data = data };
}
static rvl_kv mkarr(const char *key, uint32_t arr_type, const void *data, uint64_t n)
{
    return (rvl_kv){ .key = { key, strlen(key) }, .type = RVL_GGUF_ARRAY,
                     .arr_type = arr_type, .n = n, .data = data };
}

/* The content of golden-pywriter.gguf, added in the same order as
 * scripts/make-gguf-corpus.py's golden() (after general.architecture,
 * which gguf-py's constructor adds first). Tensor data come from `bufs`;
 * with `stream`, tensors b and d are added without data and streamed. */
static void write_golden(rvl_gguf_writer *w, uint8_t *bufs[5], bool stream)
{
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint64_t u64 = (1ull << 40) + 7; int64_t i64 = -(1ll << 40); double f64 = 3.25;
    rvl_kv kv;
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "llama"), 0);
    kv = mkkv("t.u8", RVL_GGUF_U8, &u8);    assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
    kv = mkkv("t.i8", RVL_GGUF_I8, &i8);    assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
    kv = mkkv("t.u16", RVL_GGUF_U16, &u16); assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
    kv = mkkv("t.i16", RVL_GGUF_I16, &i16); assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "t.u32", 4000000000u), 0);
    assert_int_equal(rvl_gguf_writer_kv_i32(w, "t.i32", -2000000000), 0);
    assert_int_equal(rvl_gguf_writer_kv_f32(w, "t.f32", 0.5f), 0);
    assert_int_equal(rvl_gguf_writer_kv_bool(w, "t.bool", true), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "t.str", "h\xc3\xa9llo"), 0);
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 64), 0);
    assert_int_equal(rvl_gguf_writer_kv_u64(w, "t.u64", u64), 0);
    kv = mkkv("t.i64", RVL_GGUF_I64, &i64); assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
    kv = mkkv("t.f64", RVL_GGUF_F64, &f64); assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);

    static const uint8_t au8[] = { 1, 2, 255 };
    static const int8_t ai8[] = { -1, 0, 127 };
    static const uint16_t au16[] = { 1, 65535 };
    static const int16_t ai16[] = { -32768, 5 };
    static const uint32_t au32[] = { 7, 8, 9 };
    static const int32_t ai32[] = { -7, 8, -9 };
    static const float af32[] = { 0.25f, -1.5f };
    static const uint8_t abool[] = { 1, 0, 1 };
    static const rvl_str astr[] = { { "a", 1 }, { "", 0 }, { "ccc", 3 } };
    static const uint64_t au64[] = { (1ull << 63) + 1 };
    static const int64_t ai64[] = { -(1ll << 62), 3 };
    static const double af64[] = { 1e100, -0.125 };
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.u8", RVL_GGUF_U8, au8, 3), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.i8", RVL_GGUF_I8, ai8, 3), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.u16", RVL_GGUF_U16, au16, 2), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.i16", RVL_GGUF_I16, ai16, 2), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.u32", RVL_GGUF_U32, au32, 3), 0);
    kv = mkarr("a.i32", RVL_GGUF_I32, ai32, 3);
    assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.f32", RVL_GGUF_F32, af32, 2), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.bool", RVL_GGUF_BOOL, abool, 3), 0);
    assert_int_equal(rvl_gguf_writer_kv_str_arr(w, "a.str", astr, 3), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.u64", RVL_GGUF_U64, au64, 1), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.i64", RVL_GGUF_I64, ai64, 2), 0);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "a.f64", RVL_GGUF_F64, af64, 2), 0);

    static const uint64_t ne_a[] = { 5, 3 }, ne_b[] = { 64, 2 }, ne_c[] = { 7 },
                          ne_d[] = { 2, 2, 2 }, ne_e[] = { 256, 1, 1, 2 };
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "a", RVL_TYPE_F32, 2, ne_a, bufs[0]), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "b", RVL_TYPE_Q8_0, 2, ne_b,
                                                stream ? NULL : bufs[1]), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "c", RVL_TYPE_F16, 1, ne_c, bufs[2]), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "d", RVL_TYPE_I32, 3, ne_d,
                                                stream ? NULL : bufs[3]), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "e", RVL_TYPE_Q4_K, 4, ne_e, bufs[4]), 0);
}

static const size_t golden_nbytes[5] = { 60, 136, 14, 32, 288 };

static void golden_bufs(uint8_t *bufs[5])
{
    for (int k = 0; k < 5; k++)
        bufs[k] = pattern(golden_nbytes[k], k);
}

static void free_bufs(uint8_t *bufs[5])
{
    for (int k = 0; k < 5; k++)
        free(bufs[k]);
}

static void test_gguf_writer_matches_gguf_py(void **state)
{
    (void)state;
    const char *golden = "tests/fuzz/corpus/gguf/golden-pywriter.gguf";
    size_t glen, len;
    uint8_t *want = slurp(golden, &glen);
    if (!want)
        print_error("%s not found: run the tests from the repository root\n", golden);
    assert_non_null(want);

    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("golden.gguf")), 0);
    write_golden(w, bufs, false);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    uint8_t *got = slurp(tpath("golden.gguf"), &len);
    assert_non_null(got);
    assert_int_equal(len, glen);
    assert_memory_equal(got, want, glen);
    free(got);
    free(want);
    free_bufs(bufs);
    unlink(tpath("golden.gguf"));
}

static void test_gguf_writer_round_trips(void **state)
{
    (void)state;
    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("rt.gguf")), 0);
    write_golden(w, bufs, false);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);

    rvl_file *f;
    assert_int_equal(rvl_file_open(&f, tpath("rt.gguf")), 0);
    assert_int_equal(rvl_file_version(f), 3);
    assert_int_equal(rvl_file_alignment(f), 64);
    assert_int_equal(rvl_file_size(f) % 64, 0);
    assert_int_equal(rvl_file_n_kv(f), 26);
    assert_true(rvl_str_eq(rvl_file_kv(f, 0)->key, "general.architecture"));
    assert_true(rvl_str_eq(rvl_file_kv(f, 10)->key, "general.alignment"));

    uint64_t u; int64_t i; double d; rvl_str s;
    assert_int_equal(rvl_kv_get_u64(rvl_file_find_kv(f, "t.u8"), &u), 0);   assert_int_equal(u, 200);
    assert_int_equal(rvl_kv_get_i64(rvl_file_find_kv(f, "t.i16"), &i), 0);  assert_int_equal(i, -30000);
    assert_int_equal(rvl_kv_get_u64(rvl_file_find_kv(f, "t.u32"), &u), 0);  assert_int_equal(u, 4000000000u);
    assert_int_equal(rvl_kv_get_i64(rvl_file_find_kv(f, "t.i32"), &i), 0);  assert_int_equal(i, -2000000000);
    assert_int_equal(rvl_kv_get_f64(rvl_file_find_kv(f, "t.f32"), &d), 0);  assert_true(d == 0.5);
    assert_int_equal(rvl_kv_get_u64(rvl_file_find_kv(f, "t.bool"), &u), 0); assert_int_equal(u, 1);
    assert_int_equal(rvl_kv_get_str(rvl_file_find_kv(f, "t.str"), &s), 0);
    assert_true(rvl_str_eq(s, "h\xc3\xa9llo"));
    assert_int_equal(rvl_kv_get_u64(rvl_file_find_kv(f, "t.u64"), &u), 0);
    assert_true(u == (1ull << 40) + 7);
    assert_int_equal(rvl_kv_get_i64(rvl_file_find_kv(f, "t.i64"), &i), 0);
    assert_true(i == -(1ll << 40));
    assert_int_equal(rvl_kv_get_f64(rvl_file_find_kv(f, "t.f64"), &d), 0);  assert_true(d == 3.25);
    const rvl_kv *kv = rvl_file_find_kv(f, "a.str");
    assert_int_equal(kv->n, 3);
    assert_true(rvl_str_eq(kv->strs[2], "ccc"));
    kv = rvl_file_find_kv(f, "a.i64");
    assert_true(rvl_kv_arr_i64(kv, 0) == -(1ll << 62));
    kv = rvl_file_find_kv(f, "a.f64");
    assert_true(rvl_kv_arr_f64(kv, 0) == 1e100);

    assert_int_equal(rvl_file_n_tensors(f), 5);
    static const char *names[] = { "a", "b", "c", "d", "e" };
    static const uint32_t types[] = { RVL_TYPE_F32, RVL_TYPE_Q8_0, RVL_TYPE_F16,
                                      RVL_TYPE_I32, RVL_TYPE_Q4_K };
    static const uint32_t ndims[] = { 2, 2, 1, 3, 4 };
    uint64_t off = rvl_file_data_offset(f);
    for (int k = 0; k < 5; k++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, k);
        assert_true(rvl_str_eq(t->name, names[k]));
        assert_ptr_equal(rvl_file_find_tensor(f, names[k]), t);
        assert_int_equal(t->type, types[k]);
        assert_int_equal(t->n_dims, ndims[k]);
        assert_int_equal(t->nbytes, golden_nbytes[k]);
        assert_int_equal(t->offset, off);
        assert_memory_equal(t->data, bufs[k], golden_nbytes[k]);
        off += (golden_nbytes[k] + 63) / 64 * 64;
    }
    assert_int_equal(rvl_file_tensor(f, 4)->ne[3], 2);
    assert_int_equal(off, rvl_file_size(f));
    rvl_file_close(f);
    free_bufs(bufs);
    unlink(tpath("rt.gguf"));
}

static void test_gguf_writer_kv_copy_reproduces_a_file(void **state)
{
    (void)state;
    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("src.gguf")), 0);
    write_golden(w, bufs, false);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);

    /* copy every kv and tensor of src into dst: identical bytes */
    rvl_file *f;
    assert_int_equal(rvl_file_open(&f, tpath("src.gguf")), 0);
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("dst.gguf")), 0);
    for (uint64_t i = 0; i < rvl_file_n_kv(f); i++)
        assert_int_equal(rvl_gguf_writer_kv_copy(w, rvl_file_kv(f, i)), 0);
    for (uint64_t i = 0; i < rvl_file_n_tensors(f); i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_int_equal(rvl_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne,
                                                    t->data), 0);
    }
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    rvl_file_close(f);

    size_t la, lb;
    uint8_t *a = slurp(tpath("src.gguf"), &la), *b = slurp(tpath("dst.gguf"), &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    free_bufs(bufs);
    unlink(tpath("src.gguf"));
    unlink(tpath("dst.gguf"));
}

static void test_gguf_writer_streams_tensor_data(void **state)
{
    (void)state;
    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("stream.gguf")), 0);
    write_golden(w, bufs, true);                 /* b and d have no data yet */
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1], 10), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "before begin_data"));
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "late", 1), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 0, bufs[0], 60), RVL_EINVAL);  /* has data */
    assert_non_null(strstr(rvl_errmsg(), "already written"));
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 3, bufs[3], 32), RVL_EINVAL);  /* out of order */
    assert_non_null(strstr(rvl_errmsg(), "index order"));
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 9, bufs[3], 32), RVL_EINVAL);
    /* b in three chunks, one too many bytes refused on the way */
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1], 100), 0);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1] + 100, 37), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "37 bytes supplied but only 36 of its 136 bytes remain"));
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1] + 100, 0), 0);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1] + 100, 36), 0);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 3, bufs[3], 32), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);

    /* the same bytes as writing everything from memory */
    size_t la, lb;
    uint8_t *a = slurp(tpath("stream.gguf"), &la);
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("mem.gguf")), 0);
    write_golden(w, bufs, false);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    uint8_t *b = slurp(tpath("mem.gguf"), &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    free_bufs(bufs);
    unlink(tpath("stream.gguf"));
    unlink(tpath("mem.gguf"));
    assert_int_equal(dir_entries(), 0);
}

static void test_gguf_writer_finish_fails_on_missing_tensor_data(void **state)
{
    (void)state;
    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("missing.gguf")), 0);
    write_golden(w, bufs, true);
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1], 50), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "tensor 1 ('b') is incomplete: 50 of 136 bytes"));
    assert_int_equal(dir_entries(), 0);          /* no file, no temporary */
    free_bufs(bufs);
}

static void test_gguf_writer_fails_in_missing_directory(void **state)
{
    (void)state;
    rvl_gguf_writer *w = (rvl_gguf_writer *)1;
    int rc = rvl_gguf_writer_open(&w, tpath("no/such/dir/out.gguf"));
    assert_true(rc < 0);
    assert_null(w);
    assert_non_null(strstr(rvl_errmsg(), "no/such/dir/out.gguf"));
    assert_int_equal(dir_entries(), 0);
}

static void test_gguf_writer_abort_leaves_nothing(void **state)
{
    (void)state;
    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("aborted.gguf")), 0);
    write_golden(w, bufs, true);
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    assert_true(dir_entries() <= 1);             /* the temporary: unnamed (O_TMPFILE) or hidden */
    assert_true(access(tpath("aborted.gguf"), F_OK) != 0);
    rvl_gguf_writer_abort(w);
    assert_int_equal(dir_entries(), 0);
    rvl_gguf_writer_abort(NULL);

    /* abort before begin_data too */
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("aborted.gguf")), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "x", 1), 0);
    rvl_gguf_writer_abort(w);
    assert_int_equal(dir_entries(), 0);
    free_bufs(bufs);
}

static void test_gguf_writer_replaces_destination_only_at_finish(void **state)
{
    (void)state;
    const char *dst = tpath("model.gguf");
    FILE *fp = fopen(dst, "wb");
    assert_non_null(fp);
    fputs("old contents", fp);
    fclose(fp);

    uint8_t *bufs[5];
    golden_bufs(bufs);
    rvl_gguf_writer *w;
    size_t len;
    assert_int_equal(rvl_gguf_writer_open(&w, dst), 0);
    write_golden(w, bufs, true);
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 1, bufs[1], 136), 0);
    uint8_t *old = slurp(dst, &len);             /* still the old file */
    assert_int_equal(len, 12);
    assert_memory_equal(old, "old contents", 12);
    free(old);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 3, bufs[3], 32), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    assert_int_equal(dir_entries(), 1);
    rvl_file *f;
    assert_int_equal(rvl_file_open(&f, dst), 0);
    assert_int_equal(rvl_file_n_tensors(f), 5);
    rvl_file_close(f);
    unlink(dst);
    free_bufs(bufs);
}

static void test_gguf_writer_rejects_bad_input(void **state)
{
    (void)state;
    rvl_gguf_writer *w;
    uint64_t ne[5] = { 32, 1, 1, 1, 1 };
    uint8_t two = 2;
    char longname[80];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;

    assert_int_equal(rvl_gguf_writer_open(&w, tpath("bad.gguf")), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "k", 1), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "k", 2), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "duplicate metadata key 'k'"));
    assert_int_equal(rvl_gguf_writer_kv_str(w, "", "v"), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "s", NULL), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "b", RVL_GGUF_BOOL, &two, 1), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "n", RVL_GGUF_ARRAY, &two, 1), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "n", 77, &two, 1), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_arr(w, "huge", RVL_GGUF_U64, &two, UINT64_MAX / 4),
                     RVL_ERANGE);
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 0), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 24), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_u64(w, "general.alignment", 64), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "general.alignment", 7), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "t", RVL_TYPE_F32, 1, ne, NULL), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "t", RVL_TYPE_F32, 1, ne, NULL), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "duplicate tensor name 't'"));
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "u", RVL_TYPE_F32, 5, ne, NULL), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "u", RVL_TYPE_F32, 0, ne, NULL), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "u", 4, 1, ne, NULL), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "u", RVL_TYPE_U8, 1, ne, NULL), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "u", RVL_TYPE_Q4_K, 1, ne, NULL), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "not a whole number of Q4_K blocks of 256"));
    assert_int_equal(rvl_gguf_writer_add_tensor(w, longname, RVL_TYPE_F32, 1, ne, NULL),
                     RVL_EINVAL);
    uint64_t big[2] = { 1ull << 40, 1ull << 40 };
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "u", RVL_TYPE_F32, 2, big, NULL), RVL_ERANGE);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "", RVL_TYPE_F32, 1, ne, NULL), RVL_EINVAL);
    /* set twice: the key stays where it was first set, with the new value */
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 16), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "after", 1), 0);
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 128), 0);
    float data[32] = { 0 };
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "late", RVL_TYPE_F32, 1, ne, NULL),
                     RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 32), RVL_EINVAL);
    assert_int_equal(rvl_gguf_writer_tensor_data(w, 0, data, sizeof data), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);

    rvl_file *f;
    assert_int_equal(rvl_file_open(&f, tpath("bad.gguf")), 0);
    assert_int_equal(rvl_file_n_kv(f), 3);
    assert_true(rvl_str_eq(rvl_file_kv(f, 1)->key, "general.alignment"));
    assert_int_equal(rvl_file_alignment(f), 128);
    assert_int_equal(rvl_file_data_offset(f) % 128, 0);
    assert_int_equal(rvl_file_size(f), rvl_file_data_offset(f) + 128);
    rvl_file_close(f);
    unlink(tpath("bad.gguf"));
}

static void test_gguf_writer_writes_empty_file(void **state)
{
    (void)state;
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, tpath("empty.gguf")), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);     /* begin_data implied */
    size_t len;
    uint8_t *p = slurp(tpath("empty.gguf"), &len);
    assert_int_equal(len, 32);                            /* header, padded */
    assert_memory_equal(p, "GGUF\x03\0\0\0", 8);
    rvl_gguf *g;
    assert_int_equal(rvl_gguf_parse(&g, p, len, "empty.gguf"), 0);
    assert_int_equal(g->n_kv, 0);
    assert_int_equal(g->n_tensors, 0);
    rvl_gguf_free(g);
    free(p);
    unlink(tpath("empty.gguf"));
}

int main(void)
{
    const struct CMUnitTest reader[] = {
        cmocka_unit_test(test_gguf_parses_v3_with_every_value_type),
        cmocka_unit_test(test_gguf_parses_v2_with_every_value_type),
        cmocka_unit_test(test_gguf_parses_empty_arrays),
        cmocka_unit_test(test_gguf_accessors_refuse_lossy_conversions),
        cmocka_unit_test(test_gguf_parses_tensor_infos_and_data),
        cmocka_unit_test(test_gguf_honors_custom_alignment),
        cmocka_unit_test(test_gguf_rejects_bad_alignment),
        cmocka_unit_test(test_gguf_rejects_bad_magic),
        cmocka_unit_test(test_gguf_rejects_v1_and_unknown_versions),
        cmocka_unit_test(test_gguf_rejects_big_endian),
        cmocka_unit_test(test_gguf_rejects_every_truncation),
        cmocka_unit_test(test_gguf_rejects_huge_counts),
        cmocka_unit_test(test_gguf_rejects_huge_string_length),
        cmocka_unit_test(test_gguf_rejects_huge_array_count),
        cmocka_unit_test(test_gguf_rejects_unknown_value_type),
        cmocka_unit_test(test_gguf_rejects_nested_arrays),
        cmocka_unit_test(test_gguf_rejects_bad_bool),
        cmocka_unit_test(test_gguf_rejects_duplicate_keys),
        cmocka_unit_test(test_gguf_rejects_unknown_tensor_type),
        cmocka_unit_test(test_gguf_rejects_bad_dimension_count),
        cmocka_unit_test(test_gguf_rejects_shape_overflow),
        cmocka_unit_test(test_gguf_rejects_row_not_multiple_of_block_size),
        cmocka_unit_test(test_gguf_rejects_unaligned_offset),
        cmocka_unit_test(test_gguf_rejects_tensor_past_eof),
        cmocka_unit_test(test_gguf_rejects_overlapping_tensors),
        cmocka_unit_test(test_gguf_rejects_duplicate_tensor_names),
        cmocka_unit_test(test_gguf_error_names_are_printable),
        cmocka_unit_test(test_gguf_parses_real_vocab_files),
    };
    const struct CMUnitTest writer[] = {
        cmocka_unit_test(test_gguf_writer_matches_gguf_py),
        cmocka_unit_test(test_gguf_writer_round_trips),
        cmocka_unit_test(test_gguf_writer_kv_copy_reproduces_a_file),
        cmocka_unit_test(test_gguf_writer_streams_tensor_data),
        cmocka_unit_test(test_gguf_writer_finish_fails_on_missing_tensor_data),
        cmocka_unit_test(test_gguf_writer_fails_in_missing_directory),
        cmocka_unit_test(test_gguf_writer_abort_leaves_nothing),
        cmocka_unit_test(test_gguf_writer_replaces_destination_only_at_finish),
        cmocka_unit_test(test_gguf_writer_rejects_bad_input),
        cmocka_unit_test(test_gguf_writer_writes_empty_file),
    };
    int failed = cmocka_run_group_tests_name("gguf reader", reader, NULL, NULL);
    failed += cmocka_run_group_tests_name("gguf writer", writer, setup_tmpdir, teardown_tmpdir);
    return failed ? 1 : 0;
}
