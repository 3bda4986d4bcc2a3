/*
 * test_safetensors.c - the safetensors reader (one image, files,
 * directories, sharded models) and writer.
 *
 * Images are built in memory by mk(): u64 LE header length, the header
 * text, then `dlen` data bytes. Every rejection also checks that the
 * message names the file (and the tensor where there is one).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "format/format_int.h"
#include "ruvllm_tools.h"

#define FN "t.safetensors"

/* ======================================================================
 * Helpers
 * ====================================================================== */

static unsigned char *mk_raw(uint64_t hlen_field, const char *hdr, size_t dlen, size_t *size)
{
    size_t n = strlen(hdr);
    unsigned char *b = malloc(8 + n + dlen + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, hdr, n);
    for (size_t i = 0; i < dlen; i++)
        b[8 + n + i] = (unsigned char)(i * 7 + 1);
    *size = 8 + n + dlen;
    return b;
}

static unsigned char *mk(const char *hdr, size_t dlen, size_t *size)
{
    return mk_raw(strlen(hdr), hdr, dlen, size);
}

static rvl_st *parse_ok(const char *hdr, size_t dlen, unsigned char **img)
{
    size_t size;
    rvl_st *st = NULL;
    *img = mk(hdr, dlen, &size);
    int rc = rvl_st_parse(&st, *img, size, FN, 0);
    if (rc != 0)
        fail_msg("parse failed (%d): %s\nheader: %s", rc, rvl_errmsg(), hdr);
    assert_non_null(st);
    return st;
}

static void check_msg(const char *frag)
{
    const char *m = rvl_errmsg();
    if (!strstr(m, FN) || (frag && !strstr(m, frag)))
        fail_msg("message '%s' lacks '%s' / '%s'", m, FN, frag ? frag : "");
}

static void expect_err_img(const unsigned char *img, size_t size, int code, const char *frag)
{
    rvl_st *st = (rvl_st *)1;
    int rc = rvl_st_parse(&st, img, size, FN, 0);
    if (rc != code)
        fail_msg("expected %d, got %d: %s", code, rc, rvl_errmsg());
    assert_null(st);
    check_msg(frag);
}

static void expect_err(const char *hdr, size_t dlen, int code, const char *frag)
{
    size_t size;
    unsigned char *img = mk(hdr, dlen, &size);
    expect_err_img(img, size, code, frag);
    free(img);
}

static const rvl_tensor_info *find(const rvl_st *st, const char *name)
{
    for (uint64_t i = 0; i < st->n_tensors; i++)
        if (rvl_str_eq(st->tensors[i].name, name))
            return &st->tensors[i];
    fail_msg("tensor %s not found", name);
    return NULL;
}

/* A one-tensor header around an entry body. */
static char *one(const char *entry)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "{\"w\":%s}", entry);
    return buf;
}

/* ======================================================================
 * Valid images
 * ====================================================================== */

static const struct {
    const char *dtype;
    uint32_t type;
    uint32_t size;
} all_dtypes[] = {
    { "F64", RVL_TYPE_F64, 8 }, { "F32", RVL_TYPE_F32, 4 }, { "F16", RVL_TYPE_F16, 2 },
    { "BF16", RVL_TYPE_BF16, 2 }, { "I64", RVL_TYPE_I64, 8 }, { "I32", RVL_TYPE_I32, 4 },
    { "I16", RVL_TYPE_I16, 2 }, { "I8", RVL_TYPE_I8, 1 }, { "U8", RVL_TYPE_U8, 1 },
    { "BOOL", RVL_TYPE_BOOL, 1 },
};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static void test_st_parses_every_dtype(void **state)
{
    (void)state;
    char hdr[2048];
    size_t n = 0, off = 0;
    uint64_t begins[N_DTYPES];

    n += (size_t)snprintf(hdr + n, sizeof hdr - n, "{");
    for (size_t i = 0; i < N_DTYPES; i++) {
        begins[i] = off;
        n += (size_t)snprintf(hdr + n, sizeof hdr - n,
                              "%s\"t_%s\":{\"dtype\":\"%s\",\"shape\":[2],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", all_dtypes[i].dtype, all_dtypes[i].dtype, off,
                              off + 2 * all_dtypes[i].size);
        off += 2 * all_dtypes[i].size;
    }
    snprintf(hdr + n, sizeof hdr - n, "}");

    unsigned char *img;
    rvl_st *st = parse_ok(hdr, off, &img);
    assert_int_equal(st->n_tensors, N_DTYPES);
    assert_int_equal(st->n_kv, 0);
    assert_int_equal(st->n_shards, 1);
    for (size_t i = 0; i < N_DTYPES; i++) {
        const rvl_tensor_info *t = &st->tensors[i];   /* offset order = header order */
        char name[16];
        snprintf(name, sizeof name, "t_%s", all_dtypes[i].dtype);
        assert_true(rvl_str_eq(t->name, name));
        assert_int_equal(t->type, all_dtypes[i].type);
        assert_int_equal(t->n_dims, 1);
        assert_int_equal(t->ne[0], 2);
        assert_int_equal(t->n_elements, 2);
        assert_int_equal(t->nbytes, 2 * all_dtypes[i].size);
        assert_int_equal(t->offset, 8 + strlen(hdr) + begins[i]);
        assert_ptr_equal(t->data, img + t->offset);
        assert_int_equal(t->shard, 0);
    }
    rvl_st_free(st);
    free(img);
}

static void test_st_stores_shape_reversed(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok(one("{\"dtype\":\"U8\",\"shape\":[2,3,4],\"data_offsets\":[0,24]}"),
                          24, &img);
    const rvl_tensor_info *t = find(st, "w");
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 2);
    for (int d = 3; d < RVL_MAX_DIMS; d++)
        assert_int_equal(t->ne[d], 1);
    assert_int_equal(t->n_elements, 24);
    rvl_st_free(st);
    free(img);
}

static void test_st_parses_eight_dims(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok(
        one("{\"dtype\":\"I8\",\"shape\":[1,2,1,2,1,2,1,3],\"data_offsets\":[0,24]}"), 24, &img);
    const rvl_tensor_info *t = find(st, "w");
    assert_int_equal(t->n_dims, 8);
    assert_int_equal(t->ne[0], 3);
    assert_int_equal(t->ne[7], 1);
    rvl_st_free(st);
    free(img);
}

static void test_st_parses_scalar_shape(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok(one("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}"), 4, &img);
    const rvl_tensor_info *t = find(st, "w");
    assert_int_equal(t->n_dims, 0);
    assert_int_equal(t->n_elements, 1);
    assert_int_equal(t->nbytes, 4);
    rvl_st_free(st);
    free(img);
}

static void test_st_parses_zero_size_dims(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok("{\"z1\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                          "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                          "\"z2\":{\"dtype\":\"I64\",\"shape\":[2,0],\"data_offsets\":[4,4]},"
                          "\"z3\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                          4, &img);
    assert_int_equal(st->n_tensors, 4);
    const rvl_tensor_info *z1 = find(st, "z1"), *z2 = find(st, "z2");
    assert_int_equal(z1->n_elements, 0);
    assert_int_equal(z1->nbytes, 0);
    assert_int_equal(z1->ne[0], 3);
    assert_int_equal(z1->ne[1], 0);
    assert_int_equal(z2->nbytes, 0);
    /* stable order: by offset, then size, then name */
    assert_true(rvl_str_eq(st->tensors[0].name, "z1"));
    assert_true(rvl_str_eq(st->tensors[1].name, "a"));
    assert_true(rvl_str_eq(st->tensors[2].name, "z2"));
    assert_true(rvl_str_eq(st->tensors[3].name, "z3"));
    rvl_st_free(st);
    free(img);
}

static void test_st_parses_metadata(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\\u00e9llo \\\"q\\\"\"},"
                          "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                          1, &img);
    assert_int_equal(st->n_tensors, 1);
    assert_int_equal(st->n_kv, 2);
    assert_true(rvl_str_eq(st->kv[0].key, "format"));
    assert_int_equal(st->kv[0].type, RVL_GGUF_STRING);
    assert_int_equal(st->kv[0].n, 1);
    assert_true(rvl_str_eq(st->kv[0].strs[0], "pt"));
    assert_memory_equal(st->kv[0].data, "pt", 2);
    assert_true(rvl_str_eq(st->kv[1].key, "note"));
    assert_true(rvl_str_eq(st->kv[1].strs[0], "h\xc3\xa9llo \"q\""));
    rvl_str v;
    assert_int_equal(rvl_kv_get_str(&st->kv[0], &v), 0);
    assert_int_equal(v.len, 2);
    rvl_st_free(st);
    free(img);
}

static void test_st_accepts_empty_and_padded_headers(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok("{}", 0, &img);
    assert_int_equal(st->n_tensors, 0);
    rvl_st_free(st);
    free(img);
    st = parse_ok("{\"__metadata__\":{}}      ", 0, &img);
    assert_int_equal(st->n_kv, 0);
    rvl_st_free(st);
    free(img);
    st = parse_ok("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} \n\t\r", 1, &img);
    assert_int_equal(st->n_tensors, 1);
    rvl_st_free(st);
    free(img);
}

static void test_st_orders_tensors_by_offset(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]},"
                          "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]},"
                          "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}",
                          6, &img);
    assert_true(rvl_str_eq(st->tensors[0].name, "a"));
    assert_true(rvl_str_eq(st->tensors[1].name, "b"));
    assert_true(rvl_str_eq(st->tensors[2].name, "c"));
    assert_int_equal(((const unsigned char *)st->tensors[1].data)[0], 3 * 7 + 1);
    rvl_st_free(st);
    free(img);
}

static void test_st_ignores_unknown_entry_fields(void **state)
{
    (void)state;
    unsigned char *img;
    rvl_st *st = parse_ok(one("{\"dtype\":\"U8\",\"extra\":{\"x\":[1,2]},\"shape\":[1],"
                              "\"data_offsets\":[0,1]}"), 1, &img);
    assert_int_equal(st->n_tensors, 1);
    rvl_st_free(st);
    free(img);
}

/* ======================================================================
 * Header length and JSON
 * ====================================================================== */

static void test_st_rejects_short_file(void **state)
{
    (void)state;
    const unsigned char b[5] = { 2, 0, 0, 0, 0 };
    expect_err_img(b, sizeof b, RVL_EFORMAT, "too short for the header length at byte 0");
    expect_err_img(NULL, 0, RVL_EFORMAT, "at byte 0");
}

static void test_st_rejects_header_length_past_eof(void **state)
{
    (void)state;
    size_t size;
    unsigned char *img = mk_raw(100, "{}", 0, &size);
    expect_err_img(img, size, RVL_EFORMAT, "header length 100 exceeds file size 10 at byte 0");
    free(img);
    img = mk_raw(1000000000000000ull, "{}", 0, &size);
    expect_err_img(img, size, RVL_EFORMAT, "header length 1000000000000000 exceeds file size");
    free(img);
    img = mk_raw(UINT64_MAX, "{}", 0, &size);
    expect_err_img(img, size, RVL_EFORMAT, "exceeds file size 10 at byte 0");
    free(img);
}

static void test_st_rejects_header_over_100mb(void **state)
{
    (void)state;
    /* a big file whose pages are never touched past the first */
    size_t size = 120u << 20;
    unsigned char *b = mmap(NULL, size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    assert_true(b != MAP_FAILED);
    uint64_t hlen = RVL_ST_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen >> (8 * i));
    b[8] = '{';
    expect_err_img(b, size, RVL_EFORMAT, "exceeds the limit of 100000000 bytes at byte 0");
    munmap(b, size);
}

static void test_st_rejects_invalid_json(void **state)
{
    (void)state;
    expect_err("{\"w\": }", 0, RVL_EFORMAT, "invalid JSON at byte 14");
    expect_err("{\"w\":{\"dtype\":\"U8\"", 0, RVL_EFORMAT, "invalid JSON at byte");
    expect_err("{\"w\":{\"dtype\":\"U8,", 0, RVL_EFORMAT, "invalid JSON at byte");
    expect_err("{\"w\":tru}", 0, RVL_EFORMAT, "invalid JSON at byte");
    expect_err("{,}", 0, RVL_EFORMAT, "invalid JSON at byte");
    expect_err("{\"a\":1,}", 0, RVL_EFORMAT, "invalid JSON at byte");
    expect_err("{\"a\" 1}", 0, RVL_EFORMAT, "invalid JSON at byte");
    expect_err("{'a':1}", 0, RVL_EFORMAT, "invalid JSON at byte");
}

static void test_st_rejects_non_object_header(void **state)
{
    (void)state;
    expect_err("[]", 0, RVL_EFORMAT, "header does not start with '{' at byte 8");
    expect_err("\"x\"", 0, RVL_EFORMAT, "does not start with '{'");
    expect_err(" {}", 0, RVL_EFORMAT, "does not start with '{'");
    expect_err("\xef\xbb\xbf{}", 0, RVL_EFORMAT, "does not start with '{'");
    expect_err("", 0, RVL_EFORMAT, "does not start with '{'");
    expect_err("{} {}", 0, RVL_EFORMAT, "unexpected data after the JSON object at byte 11");
    expect_err("{}x", 0, RVL_EFORMAT, "unexpected data after");
}

static void test_st_rejects_hostile_strings(void **state)
{
    (void)state;
    /* cJSON would cut these names at the NUL */
    expect_err("{\"a\\u0000b\":{}}", 0, RVL_EFORMAT, "\\u0000 in a header string at byte 11");
    expect_err("{\"a\x01\":{}}", 0, RVL_EFORMAT, "control character 0x01 in a header string");
    expect_err("{\"a\":{}\x01}", 0, RVL_EFORMAT, "control character 0x01 in header at byte 15");
    expect_err("{\"a\xff\":{}}", 0, RVL_EFORMAT, "invalid UTF-8 in header at byte 11");
    expect_err("{\"a\xc0\xaf\":{}}", 0, RVL_EFORMAT, "invalid UTF-8");     /* overlong */
    expect_err("{\"a\xed\xa0\x80\":{}}", 0, RVL_EFORMAT, "invalid UTF-8"); /* surrogate */
    expect_err("{\"a\xe2\x82\":{}}", 0, RVL_EFORMAT, "invalid UTF-8");     /* cut */
    expect_err("{\"\\ud800\":{}}", 0, RVL_EFORMAT, "invalid JSON");     /* lone surrogate */
}

static void test_st_rejects_deep_nesting(void **state)
{
    (void)state;
    size_t depth = 100000;
    char *h = malloc(depth * 2 + 16);
    assert_non_null(h);
    size_t n = 0;
    h[n++] = '{';
    memcpy(h + n, "\"a\":", 4);
    n += 4;
    for (size_t i = 0; i < depth; i++)
        h[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        h[n++] = ']';
    h[n++] = '}';
    h[n] = 0;
    expect_err(h, 0, RVL_EFORMAT, "header nests deeper than 16 levels at byte 28");
    free(h);
}

/* We rely on cJSON's own limit too (CJSON_NESTING_LIMIT, 1000): without it
 * a deep document would recurse until the stack overflows. */
static void test_cjson_refuses_deep_nesting(void **state)
{
    (void)state;
    size_t depth = 200000;
    char *h = malloc(depth * 2 + 1);
    assert_non_null(h);
    for (size_t i = 0; i < depth; i++) {
        h[i] = '[';
        h[depth + i] = ']';
    }
    h[2 * depth] = 0;
    assert_null(cJSON_ParseWithLength(h, 2 * depth));
    assert_int_equal(CJSON_NESTING_LIMIT, 1000);
    /* one below the limit parses */
    size_t ok = CJSON_NESTING_LIMIT - 1;
    memmove(h + ok, h + 2 * depth - ok, ok);
    cJSON *j = cJSON_ParseWithLength(h, 2 * ok);
    assert_non_null(j);
    cJSON_Delete(j);
    free(h);
}

/* ======================================================================
 * Tensor entries
 * ====================================================================== */

static void test_st_rejects_missing_fields(void **state)
{
    (void)state;
    expect_err(one("{\"shape\":[1],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': missing \"dtype\" at byte 9");
    expect_err(one("{\"dtype\":\"U8\",\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': missing \"shape\"");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1]}"), 1, RVL_EFORMAT,
               "tensor 'w': missing \"data_offsets\"");
    expect_err(one("{}"), 0, RVL_EFORMAT, "tensor 'w': missing");
}

static void test_st_rejects_wrong_field_types(void **state)
{
    (void)state;
    expect_err(one("1"), 0, RVL_EFORMAT, "tensor 'w': entry is not an object");
    expect_err(one("[]"), 0, RVL_EFORMAT, "tensor 'w': entry is not an object");
    expect_err(one("\"x\""), 0, RVL_EFORMAT, "tensor 'w': entry is not an object");
    expect_err(one("{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"dtype\" is not a string");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"shape\" is not an array");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":{},\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"shape\" is not an array");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"data_offsets\" is not a pair");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"data_offsets\" is not a pair");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":\"0,1\"}"), 1, RVL_EFORMAT,
               "tensor 'w': \"data_offsets\" is not a pair");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"data_offsets\" is not a pair");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}"), 1, RVL_EFORMAT,
               "tensor 'w': \"data_offsets\" is not a pair");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":null}"), 1, RVL_EFORMAT,
               "tensor 'w': \"data_offsets\" is not a pair");
}

static void test_st_rejects_bad_shape_entries(void **state)
{
    (void)state;
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': shape[0] is not a non-negative integer");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1,\"2\"],\"data_offsets\":[0,2]}"), 2,
               RVL_EFORMAT, "tensor 'w': shape[1] is not a non-negative integer");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[null],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "shape[0] is not a non-negative integer");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[[1]],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "shape[0] is not a non-negative integer");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "number '1.5' in header is not an integer at byte 36");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "number '1.0' in header is not an integer");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1e0],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "is not an integer");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "malformed number '01'");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[-],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "malformed number '-'");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[18446744073709551617],\"data_offsets\":[0,1]}"), 1,
               RVL_EFORMAT, "integer '18446744073709551617' in header is too large");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[9007199254740993],\"data_offsets\":[0,1]}"), 1,
               RVL_EFORMAT, "is too large (limit 2^53)");
}

static void test_st_rejects_shape_overflow(void **state)
{
    (void)state;
    /* each dim is fine, the product is not */
    expect_err(one("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}"),
               4, RVL_EFORMAT, "tensor 'w': size of shape [4294967296, 4294967296] overflows");
    expect_err(one("{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,8]}"),
               8, RVL_EFORMAT, "overflows");
    expect_err(one("{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,0],"
                   "\"data_offsets\":[0,0]}"), 0, RVL_EFORMAT, "overflows");
    /* 0 first: the product stays 0, as in the reference */
    unsigned char *img;
    rvl_st *st = parse_ok(one("{\"dtype\":\"F64\",\"shape\":[0,4294967296,4294967296],"
                              "\"data_offsets\":[0,0]}"), 0, &img);
    rvl_st_free(st);
    free(img);
}

static void test_st_rejects_end_before_begin(void **state)
{
    (void)state;
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}"), 4, RVL_EFORMAT,
               "tensor 'w': data_offsets [4, 2] end before they begin at byte 9");
}

static void test_st_rejects_size_mismatch(void **state)
{
    (void)state;
    expect_err(one("{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}"), 20, RVL_EFORMAT,
               "tensor 'w': data_offsets [0, 20] hold 20 bytes but F32 [2, 3] needs 24");
    expect_err(one("{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,4]}"), 4, RVL_EFORMAT,
               "BF16 [] needs 2");
}

static void test_st_rejects_offsets_past_data(void **state)
{
    (void)state;
    const char *h = "{\"w\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[10,20]}}";
    char frag[128];
    snprintf(frag, sizeof frag, "tensor 'w': data_offsets [10, 20] exceed the data section "
             "(12 bytes) at byte %zu", 8 + strlen(h) + 10);
    expect_err(h, 12, RVL_EFORMAT, frag);
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9007199254740991,"
                   "9007199254740992]}"), 1, RVL_EFORMAT, "exceed the data section");
}

static void test_st_rejects_overlap(void **state)
{
    (void)state;
    expect_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, RVL_EFORMAT,
               "tensor 'b': data_offsets [2, 6] overlap tensor 'a' [0, 4] at byte");
    expect_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, RVL_EFORMAT,
               "overlap tensor 'a'");
    expect_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 4, RVL_EFORMAT,
               "tensor 'b': data_offsets [1, 2] overlap tensor 'a'");
}

static void test_st_rejects_hole(void **state)
{
    (void)state;
    expect_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 10, RVL_EFORMAT,
               "2 unused bytes before tensor 'b' (data_offsets [6, 10])");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1,5]}"), 5, RVL_EFORMAT,
               "1 unused bytes before tensor 'w'");
}

static void test_st_rejects_trailing_data(void **state)
{
    (void)state;
    const char *h = "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    char frag[128];
    snprintf(frag, sizeof frag, "3 bytes after the last tensor are not part of any tensor at byte %zu",
             8 + strlen(h) + 4);
    expect_err(h, 7, RVL_EFORMAT, frag);
    expect_err("{}", 1, RVL_EFORMAT, "1 bytes after the last tensor");
}

static void test_st_rejects_unsupported_dtype(void **state)
{
    (void)state;
    const char *unsup[] = { "F8_E4M3", "F8_E5M2", "U16", "U32", "U64" };
    for (size_t i = 0; i < sizeof unsup / sizeof unsup[0]; i++) {
        char e[128], frag[64];
        snprintf(e, sizeof e, "{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,1]}", unsup[i]);
        snprintf(frag, sizeof frag, "tensor 'w': unsupported dtype %s", unsup[i]);
        expect_err(one(e), 1, RVL_EUNSUPPORTED, frag);
    }
    expect_err(one("{\"dtype\":\"Q4_0\",\"shape\":[1],\"data_offsets\":[0,1]}"), 1, RVL_EFORMAT,
               "tensor 'w': unknown dtype 'Q4_0'");
    expect_err(one("{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4, RVL_EFORMAT,
               "unknown dtype 'f32'");
    expect_err(one("{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4, RVL_EFORMAT,
               "unknown dtype ''");
}

static void test_st_rejects_too_many_dims(void **state)
{
    (void)state;
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}"), 1,
               RVL_EUNSUPPORTED, "tensor 'w': 9 dimensions (at most 8 supported)");
}

static void test_st_rejects_duplicate_keys(void **state)
{
    (void)state;
    expect_err("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, RVL_EFORMAT,
               "duplicate key 'w' in header at byte 61");
    expect_err(one("{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}"), 1,
               RVL_EFORMAT, "tensor 'w': duplicate field \"dtype\"");
    expect_err(one("{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,1]}"), 1,
               RVL_EFORMAT, "tensor 'w': duplicate field \"shape\"");
    expect_err("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, RVL_EFORMAT,
               "duplicate key 'a' in __metadata__");
    expect_err("{\"__metadata__\":{},\"__metadata__\":{}}", 0, RVL_EFORMAT,
               "duplicate key '__metadata__' in header");
    /* many keys take the sorting path */
    char h[4096];
    size_t n = (size_t)snprintf(h, sizeof h, "{");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(h + n, sizeof h - n,
                              "\"t%d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]},",
                              i % 17, i, i + 1);
    snprintf(h + n - 1, sizeof h - n + 1, "}");
    expect_err(h, 20, RVL_EFORMAT, "duplicate key 't0' in header");
}

static void test_st_rejects_bad_metadata(void **state)
{
    (void)state;
    expect_err("{\"__metadata__\":{\"n\":1}}", 0, RVL_EFORMAT,
               "__metadata__ value of 'n' is not a string at byte 9");
    expect_err("{\"__metadata__\":{\"n\":null}}", 0, RVL_EFORMAT, "value of 'n' is not a string");
    expect_err("{\"__metadata__\":{\"n\":[\"a\"]}}", 0, RVL_EFORMAT, "value of 'n' is not a string");
    expect_err("{\"__metadata__\":{\"n\":{}}}", 0, RVL_EFORMAT, "value of 'n' is not a string");
    expect_err("{\"__metadata__\":{\"n\":true}}", 0, RVL_EFORMAT, "value of 'n' is not a string");
    expect_err("{\"__metadata__\":[]}", 0, RVL_EFORMAT, "__metadata__ is not an object");
    expect_err("{\"__metadata__\":\"pt\"}", 0, RVL_EFORMAT, "__metadata__ is not an object");
}

static void test_st_rejects_every_truncation(void **state)
{
    (void)state;
    size_t size;
    unsigned char *img = mk("{\"__metadata__\":{\"format\":\"pt\"},"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[8,11]}}",
                            11, &size);
    rvl_st *st;
    assert_int_equal(rvl_st_parse(&st, img, size, FN, 0), 0);
    rvl_st_free(st);
    for (size_t n = 0; n < size; n++) {
        /* a copy of exactly n bytes, so ASan sees any read past the end */
        unsigned char *p = malloc(n ? n : 1);
        memcpy(p, img, n);
        st = (rvl_st *)1;
        int rc = rvl_st_parse(&st, p, n, FN, 0);
        if (rc != RVL_EFORMAT)
            fail_msg("prefix of %zu bytes: rc %d (%s)", n, rc, rvl_errmsg());
        assert_null(st);
        check_msg("at byte");
        free(p);
    }
    free(img);
}

/* A valid image with every single bit flipped once: no crash, no leak. */
static void test_st_survives_bit_flips(void **state)
{
    (void)state;
    size_t size;
    unsigned char *img = mk("{\"a\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[0,4]},"
                            "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[4,5]}}",
                            5, &size);
    for (size_t i = 0; i < size * 8; i++) {
        img[i / 8] ^= (unsigned char)(1u << (i % 8));
        rvl_st *st = NULL;
        if (rvl_st_parse(&st, img, size, FN, 0) == 0) {
            for (uint64_t k = 0; k < st->n_tensors; k++)
                assert_true(st->tensors[k].offset + st->tensors[k].nbytes <= size);
            rvl_st_free(st);
        } else {
            assert_null(st);
            check_msg(NULL);
        }
        img[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
    free(img);
}

/* ======================================================================
 * Writer
 * ====================================================================== */

static char tmpdir[64];

static int make_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rvl-st-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[512];
    if (!d)
        return 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        if (unlink(p) < 0) {
            /* a subdirectory made by a test */
            DIR *s = opendir(p);
            struct dirent *f;
            char q[1024];
            while (s && (f = readdir(s)))
                if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) {
                    snprintf(q, sizeof q, "%s/%s", p, f->d_name);
                    unlink(q);
                }
            if (s)
                closedir(s);
            rmdir(p);
        }
    }
    closedir(d);
    return rmdir(tmpdir);
}

static char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int count_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_st_writer_round_trip(void **state)
{
    (void)state;
    unsigned char data[N_DTYPES][48];
    const uint64_t shape[3] = { 2, 3, 1 };
    const uint64_t zero_shape[2] = { 0, 5 };
    rvl_st_writer *w;
    const char *path = tpath("rt.safetensors");

    for (size_t i = 0; i < N_DTYPES; i++)
        for (size_t k = 0; k < sizeof data[i]; k++)
            data[i][k] = (unsigned char)(i * 31 + k);
    assert_int_equal(rvl_st_writer_open(&w, path), 0);
    assert_int_equal(rvl_st_writer_meta(w, "format", "pt"), 0);
    assert_int_equal(rvl_st_writer_meta(w, "quote\"d", "line\nbreak"), 0);
    for (size_t i = 0; i < N_DTYPES; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%zu.%s", i, all_dtypes[i].dtype);
        assert_int_equal(rvl_st_writer_add(w, name, all_dtypes[i].type, 3, shape, data[i]), 0);
    }
    assert_int_equal(rvl_st_writer_add(w, "scalar", RVL_TYPE_F32, 0, NULL, data[0]), 0);
    assert_int_equal(rvl_st_writer_add(w, "empty", RVL_TYPE_BF16, 2, zero_shape, NULL), 0);
    assert_int_equal(rvl_st_writer_add(w, "na\xc3\xafve \"name\"", RVL_TYPE_U8, 1, shape,
                                       data[1]), 0);
    /* nothing at the destination before finish */
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(rvl_st_writer_finish(w), 0);
    assert_int_equal(count_dir_entries(tmpdir), 1);

    size_t size;
    unsigned char *img = read_file(path, &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | img[i];
    assert_int_equal((8 + hlen) % 8, 0);
    assert_memory_equal(img + 8, "{\"__metadata__\":{\"format\":\"pt\",", 31);
    assert_int_equal(img[8 + hlen - 1] == ' ' || img[8 + hlen - 1] == '}', 1);

    rvl_st *st;
    assert_int_equal(rvl_st_parse(&st, img, size, path, 0), 0);
    assert_int_equal(st->n_tensors, N_DTYPES + 3);
    assert_int_equal(st->n_kv, 2);
    assert_true(rvl_str_eq(st->kv[0].key, "format"));
    assert_true(rvl_str_eq(st->kv[0].strs[0], "pt"));
    assert_true(rvl_str_eq(st->kv[1].key, "quote\"d"));
    assert_true(rvl_str_eq(st->kv[1].strs[0], "line\nbreak"));
    for (size_t i = 0; i < N_DTYPES; i++) {
        const rvl_tensor_info *t = &st->tensors[i];   /* add order is offset order */
        char name[32];
        snprintf(name, sizeof name, "layer.%zu.%s", i, all_dtypes[i].dtype);
        assert_true(rvl_str_eq(t->name, name));
        assert_int_equal(t->type, all_dtypes[i].type);
        assert_int_equal(t->n_dims, 3);
        assert_int_equal(t->ne[0], 1);
        assert_int_equal(t->ne[1], 3);
        assert_int_equal(t->ne[2], 2);
        assert_int_equal(t->nbytes, 6 * all_dtypes[i].size);
        assert_memory_equal(t->data, data[i], t->nbytes);
    }
    const rvl_tensor_info *t = find(st, "scalar");
    assert_int_equal(t->n_dims, 0);
    assert_memory_equal(t->data, data[0], 4);
    t = find(st, "empty");
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(t->ne[1], 0);
    t = find(st, "na\xc3\xafve \"name\"");
    assert_int_equal(t->nbytes, 2);
    assert_memory_equal(t->data, data[1], 2);
    rvl_st_free(st);
    free(img);

    /* and through rvl_st_open, which maps the file */
    assert_int_equal(rvl_st_open(&st, path), 0);
    assert_int_equal(st->n_tensors, N_DTYPES + 3);
    assert_int_equal(st->n_shards, 1);
    assert_string_equal(st->shard_paths[0], path);
    assert_int_equal(st->total_size, size);
    rvl_st_free(st);
    unlink(path);
}

static void test_st_writer_empty_file(void **state)
{
    (void)state;
    rvl_st_writer *w;
    const char *path = tpath("empty.safetensors");
    assert_int_equal(rvl_st_writer_open(&w, path), 0);
    assert_int_equal(rvl_st_writer_finish(w), 0);
    size_t size;
    unsigned char *img = read_file(path, &size);
    assert_int_equal(size, 16);
    assert_memory_equal(img + 8, "{}      ", 8);
    rvl_st *st;
    assert_int_equal(rvl_st_parse(&st, img, size, path, 0), 0);
    assert_int_equal(st->n_tensors, 0);
    rvl_st_free(st);
    free(img);
    unlink(path);
}

static void test_st_writer_abort_leaves_nothing(void **state)
{
    (void)state;
    rvl_st_writer *w;
    const uint64_t shape[1] = { 4 };
    float v[4] = { 1, 2, 3, 4 };
    assert_int_equal(count_dir_entries(tmpdir), 0);
    assert_int_equal(rvl_st_writer_open(&w, tpath("x.safetensors")), 0);
    assert_int_equal(rvl_st_writer_add(w, "v", RVL_TYPE_F32, 1, shape, v), 0);
    /* the temporary exists while writing: unnamed (O_TMPFILE) or hidden */
    assert_true(count_dir_entries(tmpdir) <= 1);
    rvl_st_writer_abort(w);
    assert_int_equal(count_dir_entries(tmpdir), 0);
    rvl_st_writer_abort(NULL);
}

static void test_st_writer_rejects_bad_tensors(void **state)
{
    (void)state;
    rvl_st_writer *w;
    const uint64_t shape[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    const uint64_t huge[2] = { 1ull << 40, 1ull << 40 };
    char d[8] = { 0 };
    assert_int_equal(rvl_st_writer_open(&w, tpath("bad.safetensors")), 0);
    assert_int_equal(rvl_st_writer_add(w, "a", RVL_TYPE_F32, 1, shape, d), 0);
    assert_int_equal(rvl_st_writer_add(w, "a", RVL_TYPE_F32, 1, shape, d), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "tensor 'a' added twice"));
    assert_int_equal(rvl_st_writer_add(w, "q", RVL_TYPE_Q4_0, 1, shape, d), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "type Q4_0 cannot be stored in safetensors"));
    assert_int_equal(rvl_st_writer_add(w, "n", RVL_TYPE_F32, 9, shape, d), RVL_EINVAL);
    assert_int_equal(rvl_st_writer_add(w, "__metadata__", RVL_TYPE_F32, 1, shape, d), RVL_EINVAL);
    assert_int_equal(rvl_st_writer_add(w, "bad\xff", RVL_TYPE_F32, 1, shape, d), RVL_EINVAL);
    assert_int_equal(rvl_st_writer_add(w, "h", RVL_TYPE_F32, 2, huge, d), RVL_ERANGE);
    assert_int_equal(rvl_st_writer_add(w, "nodata", RVL_TYPE_F32, 1, shape, NULL), RVL_EINVAL);
    assert_int_equal(rvl_st_writer_meta(w, "k", "v"), 0);
    assert_int_equal(rvl_st_writer_meta(w, "k", "v2"), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "bad.safetensors"));
    rvl_st_writer_abort(w);
    assert_int_equal(count_dir_entries(tmpdir), 0);
}

/* ======================================================================
 * Files, directories, shards
 * ====================================================================== */

static const float sa[4] = { 1, 2, 3, 4 };
static const int8_t sb[3] = { -1, 0, 1 };
static const uint16_t sc[4] = { 0x3f80, 0x4000, 0x4040, 0x4080 };

static void write_st(const char *path, int which)
{
    rvl_st_writer *w;
    const uint64_t s22[2] = { 2, 2 }, s3[1] = { 3 }, s4[1] = { 4 };
    assert_int_equal(rvl_st_writer_open(&w, path), 0);
    assert_int_equal(rvl_st_writer_meta(w, "format", "pt"), 0);
    if (which & 1)
        assert_int_equal(rvl_st_writer_add(w, "a", RVL_TYPE_F32, 2, s22, sa), 0);
    if (which & 2)
        assert_int_equal(rvl_st_writer_add(w, "b", RVL_TYPE_I8, 1, s3, sb), 0);
    if (which & 4)
        assert_int_equal(rvl_st_writer_add(w, "c", RVL_TYPE_BF16, 1, s4, sc), 0);
    assert_int_equal(rvl_st_writer_finish(w), 0);
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"

static void write_index(const char *a, const char *b, const char *c, const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\n  \"metadata\": {\"total_size\": 23},\n  \"weight_map\": {\n"
             "    \"a\": \"%s\",\n    \"b\": \"%s\",\n    \"c\": \"%s\"%s\n  }\n}\n",
             a, b, c, extra);
    write_text(tpath(INDEX), text);
}

static void make_sharded(void)
{
    write_st(tpath(SHARD1), 1 | 2);
    write_st(tpath(SHARD2), 4);
    write_index(SHARD1, SHARD1, SHARD2, "");
}

static void check_sharded(const rvl_st *st)
{
    assert_int_equal(st->n_shards, 2);
    assert_int_equal(st->n_tensors, 3);
    assert_string_equal(st->shard_paths[0], tpath(SHARD1));
    assert_string_equal(st->shard_paths[1], tpath(SHARD2));
    const rvl_tensor_info *a = &st->tensors[0], *b = &st->tensors[1], *c = &st->tensors[2];
    assert_true(rvl_str_eq(a->name, "a"));
    assert_true(rvl_str_eq(b->name, "b"));
    assert_true(rvl_str_eq(c->name, "c"));
    assert_int_equal(a->shard, 0);
    assert_int_equal(b->shard, 0);
    assert_int_equal(c->shard, 1);
    assert_int_equal(a->type, RVL_TYPE_F32);
    assert_int_equal(c->type, RVL_TYPE_BF16);
    assert_memory_equal(a->data, sa, sizeof sa);
    assert_memory_equal(b->data, sb, sizeof sb);
    assert_memory_equal(c->data, sc, sizeof sc);
    /* metadata: union of the shards', one "format" */
    assert_int_equal(st->n_kv, 1);
    assert_true(rvl_str_eq(st->kv[0].key, "format"));
    struct stat s1, s2;
    assert_int_equal(stat(st->shard_paths[0], &s1), 0);
    assert_int_equal(stat(st->shard_paths[1], &s2), 0);
    assert_int_equal(st->total_size, (uint64_t)(s1.st_size + s2.st_size));
}

static void test_st_opens_sharded_directory(void **state)
{
    (void)state;
    rvl_st *st;
    make_sharded();
    assert_int_equal(rvl_st_open(&st, tmpdir), 0);
    check_sharded(st);
    rvl_st_free(st);
    char slash[128];
    snprintf(slash, sizeof slash, "%s/", tmpdir);
    assert_int_equal(rvl_st_open(&st, slash), 0);
    assert_int_equal(st->n_tensors, 3);
    rvl_st_free(st);
}

static void test_st_opens_index_file(void **state)
{
    (void)state;
    rvl_st *st;
    make_sharded();
    assert_int_equal(rvl_st_open(&st, tpath(INDEX)), 0);
    check_sharded(st);
    rvl_st_free(st);
    /* a shard on its own is a plain file */
    assert_int_equal(rvl_st_open(&st, tpath(SHARD2)), 0);
    assert_int_equal(st->n_tensors, 1);
    rvl_st_free(st);
}

static void expect_open_err(const char *path, int code, const char *f1, const char *f2)
{
    rvl_st *st = (rvl_st *)1;
    int rc = rvl_st_open(&st, path);
    if (rc != code)
        fail_msg("open %s: expected %d, got %d: %s", path, code, rc, rvl_errmsg());
    assert_null(st);
    const char *m = rvl_errmsg();
    if (!strstr(m, f1) || (f2 && !strstr(m, f2)))
        fail_msg("message '%s' lacks '%s' / '%s'", m, f1, f2 ? f2 : "");
}

static void test_st_rejects_missing_shard(void **state)
{
    (void)state;
    make_sharded();
    unlink(tpath(SHARD2));
    expect_open_err(tmpdir, RVL_ENOTFOUND, INDEX, SHARD2);
}

static void test_st_rejects_index_tensor_missing_in_shard(void **state)
{
    (void)state;
    make_sharded();
    write_index(SHARD1, SHARD1, SHARD2, ",\n    \"d\": \"" SHARD2 "\"");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX,
                    "tensor 'd' is listed in weight_map for " SHARD2 " but not found there");
}

static void test_st_rejects_shard_tensor_missing_in_index(void **state)
{
    (void)state;
    make_sharded();
    write_st(tpath(SHARD2), 4 | 2);   /* "b" in both shards, "b" listed for shard 1 */
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "tensor 'b' is in both");
    write_text(tpath(INDEX), "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}");
    write_st(tpath(SHARD2), 4);
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX,
                    "tensor 'b' in " SHARD1 " is not listed in weight_map");
}

static void test_st_rejects_tensor_in_wrong_shard(void **state)
{
    (void)state;
    make_sharded();
    write_index(SHARD1, SHARD2, SHARD2, "");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX,
                    "tensor 'b' is listed in weight_map for " SHARD2 " but is in " SHARD1);
}

static void test_st_rejects_shard_path_traversal(void **state)
{
    (void)state;
    make_sharded();
    write_index(SHARD1, SHARD1, "../" SHARD2, "");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "shard '../" SHARD2 "' of tensor 'c' is not a plain");
    write_index(SHARD1, SHARD1, "..", "");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "shard '..' of tensor 'c'");
    write_index(SHARD1, SHARD1, ".", "");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "shard '.' of tensor 'c'");
    write_index(SHARD1, SHARD1, "/etc/passwd", "");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "shard '/etc/passwd'");
    write_index(SHARD1, SHARD1, "", "");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "shard '' of tensor 'c'");
}

static void test_st_rejects_bad_index(void **state)
{
    (void)state;
    make_sharded();
    write_text(tpath(INDEX), "{\"metadata\":{}}");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "no \"weight_map\" object");
    write_text(tpath(INDEX), "{\"weight_map\":{}}");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "weight_map is empty");
    write_text(tpath(INDEX), "{\"weight_map\":{\"a\":1}}");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "weight_map value for tensor 'a' is not a string");
    write_text(tpath(INDEX), "{\"weight_map\":{\"a\":\"x\",\"a\":\"x\"}}");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "tensor 'a' appears twice in weight_map");
    write_text(tpath(INDEX), "{\"weight_map\":{\"a\":\"x\"}");
    expect_open_err(tmpdir, RVL_EFORMAT, INDEX, "invalid JSON at byte");
    write_text(tpath(INDEX), "[1]");
    expect_open_err(tpath(INDEX), RVL_EFORMAT, INDEX, "is not an object");
    write_text(tpath(INDEX), "");
    expect_open_err(tpath(INDEX), RVL_EFORMAT, INDEX, "invalid JSON at byte 0");
    /* a hostile shard is reported under its own name */
    write_index(SHARD1, SHARD1, SHARD2, "");
    write_text(tpath(SHARD2), "12345678{}");
    expect_open_err(tmpdir, RVL_EFORMAT, SHARD2, "exceeds file size");
}

static void test_st_opens_single_file_directory(void **state)
{
    (void)state;
    rvl_st *st;
    write_st(tpath("model.safetensors"), 7);
    assert_int_equal(rvl_st_open(&st, tmpdir), 0);
    assert_int_equal(st->n_shards, 1);
    assert_int_equal(st->n_tensors, 3);
    assert_string_equal(st->shard_paths[0], tpath("model.safetensors"));
    rvl_st_free(st);
}

static void test_st_rejects_empty_directory(void **state)
{
    (void)state;
    expect_open_err(tmpdir, RVL_ENOTFOUND, tmpdir, "no model.safetensors");
    expect_open_err(tpath("nope.safetensors"), RVL_ENOTFOUND, "nope.safetensors", NULL);
}

#define T(f) cmocka_unit_test(f)
#define TD(f) cmocka_unit_test_setup_teardown(f, make_tmpdir, remove_tmpdir)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_st_parses_every_dtype),
        T(test_st_stores_shape_reversed),
        T(test_st_parses_eight_dims),
        T(test_st_parses_scalar_shape),
        T(test_st_parses_zero_size_dims),
        T(test_st_parses_metadata),
        T(test_st_accepts_empty_and_padded_headers),
        T(test_st_orders_tensors_by_offset),
        T(test_st_ignores_unknown_entry_fields),
        T(test_st_rejects_short_file),
        T(test_st_rejects_header_length_past_eof),
        T(test_st_rejects_header_over_100mb),
        T(test_st_rejects_invalid_json),
        T(test_st_rejects_non_object_header),
        T(test_st_rejects_hostile_strings),
        T(test_st_rejects_deep_nesting),
        T(test_cjson_refuses_deep_nesting),
        T(test_st_rejects_missing_fields),
        T(test_st_rejects_wrong_field_types),
        T(test_st_rejects_bad_shape_entries),
        T(test_st_rejects_shape_overflow),
        T(test_st_rejects_end_before_begin),
        T(test_st_rejects_size_mismatch),
        T(test_st_rejects_offsets_past_data),
        T(test_st_rejects_overlap),
        T(test_st_rejects_hole),
        T(test_st_rejects_trailing_data),
        T(test_st_rejects_unsupported_dtype),
        T(test_st_rejects_too_many_dims),
        T(test_st_rejects_duplicate_keys),
        T(test_st_rejects_bad_metadata),
        T(test_st_rejects_every_truncation),
        T(test_st_survives_bit_flips),
        TD(test_st_writer_round_trip),
        TD(test_st_writer_empty_file),
        TD(test_st_writer_abort_leaves_nothing),
        TD(test_st_writer_rejects_bad_tensors),
        TD(test_st_opens_sharded_directory),
        TD(test_st_opens_index_file),
        TD(test_st_rejects_missing_shard),
        TD(test_st_rejects_index_tensor_missing_in_shard),
        TD(test_st_rejects_shard_tensor_missing_in_index),
        TD(test_st_rejects_tensor_in_wrong_shard),
        TD(test_st_rejects_shard_path_traversal),
        TD(test_st_rejects_bad_index),
        TD(test_st_opens_single_file_directory),
        TD(test_st_rejects_empty_directory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
