/*
 * test_gguf_writer_ref.c - files written by rvl_gguf_writer are the files
 * gguf-py writes, and copies of real files are the originals.
 *
 *  - The synthetic files (every scalar and array value type with edge
 *    values, thirteen tensor types, 1 to 4 dimensions, custom and default
 *    alignment, a file without tensors) are byte-identical to the ones
 *    gguf-py's GGUFWriter wrote from the same content, committed under
 *    tests/ref/writer/ by tests/ref/check_writer_roundtrip.py; once with
 *    tensor data given up front, once streamed in odd-sized chunks.
 *  - The default model, copied through the writer (every pair with
 *    kv_copy, every tensor with its data, in file order), is
 *    byte-identical to the original (files with tensors are laid out the
 *    same by llama.cpp's C++ writer, gguf-py's and ours).
 *  - Each tokenizer GGUF in $RVL_SHARED_DATA/tokenizers, copied the same
 *    way, equals the original followed by zero bytes up to the alignment:
 *    those vocab-only exports end right after their metadata, unpadded;
 *    gguf-py's full write path and ours always pad the end. Read back with
 *    our reader, the copies hold the same pairs.
 *
 * The gguf-py side (reading all these copies back with GGUFReader and
 * comparing keys, types, values, tensors and data with the originals) is
 * tests/ref/check_writer_roundtrip.py, which runs this program with
 * RVL_WRITER_REF_OUT=DIR to keep the files it writes; its output is
 * tests/ref/writer_roundtrip.log. Without that variable the files go to a
 * temporary directory that is removed.
 *
 * Keep synthetic() in step with synthetic() in check_writer_roundtrip.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format_int.h"
#include "ruvllm_tools.h"

static char outdir[4096];
static bool keep;

static const char *opath(const char *name)
{
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", outdir, name);
    return buf[k];
}

static void model_path(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/ruvllm/models/%s", xdg, RVL_DEFAULT_MODEL_FILE);
    else
        snprintf(buf, cap, "%s/.cache/ruvllm/models/%s", getenv("HOME") ? getenv("HOME") : ".",
                 RVL_DEFAULT_MODEL_FILE);
}

static const char *shared_dir(void)
{
    const char *d = getenv("RVL_SHARED_DATA");
    return d && *d ? d : "../shared/data";
}

/* Compare two files: -1 if identical, else the first differing offset
 * (the shorter length when one is a prefix of the other). */
static int64_t first_diff(const rvl_map *a, const rvl_map *b)
{
    uint64_t n = a->size < b->size ? a->size : b->size;
    const uint8_t *x = a->base, *y = b->base;
    if (a->size == b->size && memcmp(x, y, (size_t)n) == 0)
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return (int64_t)i;
    return (int64_t)n;
}

static void assert_same_bytes(const char *got, const char *want)
{
    rvl_map a, b;
    if (rvl_map_file(&b, want) < 0) {
        print_error("%s: %s\n", want, rvl_errmsg());
        fail();
    }
    assert_int_equal(rvl_map_file(&a, got), 0);
    int64_t d = first_diff(&a, &b);
    if (d >= 0)
        print_error("%s (%" PRIu64 " bytes) differs from %s (%" PRIu64 " bytes) at byte %" PRId64 "\n",
                    got, a.size, want, b.size, d);
    rvl_map_unmap(&a);
    rvl_map_unmap(&b);
    assert_int_equal(d, -1);
}

/* ====================================================================
 * The synthetic content (mirrored by check_writer_roundtrip.py)
 * ==================================================================== */

/* Byte j of tensor k. */
static uint8_t *pattern(uint64_t n, uint64_t k)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (uint64_t j = 0; j < n; j++)
        p[j] = (uint8_t)((j * 31 + k * 17 + (j >> 9)) & 0xff);
    return p;
}

typedef struct {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
} stensor;

static const stensor synth_tensors[] = {
    { "t.f32", RVL_TYPE_F32, 2, { 5, 3 } },
    { "t.f16", RVL_TYPE_F16, 1, { 7 } },
    { "t.bf16", RVL_TYPE_BF16, 3, { 4, 2, 3 } },
    { "t.q4_1", RVL_TYPE_Q4_1, 2, { 64, 3 } },
    { "t.q8_0", RVL_TYPE_Q8_0, 4, { 32, 2, 1, 2 } },
    { "t.q4_k", RVL_TYPE_Q4_K, 2, { 256, 2 } },
    { "t.q6_k", RVL_TYPE_Q6_K, 1, { 256 } },
    { "t.i8", RVL_TYPE_I8, 1, { 3 } },
    { "t.i16", RVL_TYPE_I16, 2, { 2, 2 } },
    { "t.i32", RVL_TYPE_I32, 1, { 5 } },
    { "t.i64", RVL_TYPE_I64, 1, { 1 } },
    { "t.f64", RVL_TYPE_F64, 1, { 3 } },
    /* 63 bytes: the longest name llama.cpp accepts */
    { "t.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", RVL_TYPE_Q5_K, 1, { 256 } },
};
#define N_SYNTH (sizeof synth_tensors / sizeof synth_tensors[0])

static uint64_t tensor_bytes(const stensor *t)
{
    const rvl_type_info *ti = rvl_type_get(t->type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->ne[d];
    return n / ti->block_size * ti->type_size;
}

static void kv_raw(rvl_gguf_writer *w, const char *key, uint32_t type, const void *v)
{
    rvl_kv kv = { .key = { key, strlen(key) }, .type = type, .n = 1, .data = v };
    assert_int_equal(rvl_gguf_writer_kv_copy(w, &kv), 0);
}

#define ARR(key, vt, a) \
    assert_int_equal(rvl_gguf_writer_kv_arr(w, key, vt, a, sizeof a / sizeof a[0]), 0)

/* stream: tensors with an odd index are added without data and supplied
 * afterwards in chunks of 7 bytes. */
static void write_synthetic(const char *path, bool stream)
{
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, path), 0);

    /* gguf-py's GGUFWriter(path, arch) adds general.architecture first */
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "synthetic"), 0);
    uint8_t u8 = 255;
    int8_t i8 = -128;
    uint16_t u16 = 65535;
    int16_t i16 = -32768;
    int64_t i64 = INT64_MIN;
    double f64 = 2.718281828459045;
    kv_raw(w, "synth.u8", RVL_GGUF_U8, &u8);
    kv_raw(w, "synth.i8", RVL_GGUF_I8, &i8);
    kv_raw(w, "synth.u16", RVL_GGUF_U16, &u16);
    kv_raw(w, "synth.i16", RVL_GGUF_I16, &i16);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "synth.u32", UINT32_MAX), 0);
    assert_int_equal(rvl_gguf_writer_kv_i32(w, "synth.i32", INT32_MIN), 0);
    assert_int_equal(rvl_gguf_writer_kv_f32(w, "synth.f32", 0.1f), 0);
    assert_int_equal(rvl_gguf_writer_kv_bool(w, "synth.bool", true), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "synth.string",
                                            "h\xc3\xa9llo, w\xc3\xb6rld\n\t\"quoted\" \\ \xe2\x98\x83"), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "synth.string_empty", ""), 0);
    assert_int_equal(rvl_gguf_writer_kv_u64(w, "synth.u64", UINT64_MAX), 0);
    kv_raw(w, "synth.i64", RVL_GGUF_I64, &i64);
    kv_raw(w, "synth.f64", RVL_GGUF_F64, &f64);
    assert_int_equal(rvl_gguf_writer_set_alignment(w, 64), 0);

    static const uint8_t au8[] = { 0, 1, 127, 128, 255 };
    static const int8_t ai8[] = { -128, -1, 0, 1, 127 };
    static const uint16_t au16[] = { 0, 1, 65535 };
    static const int16_t ai16[] = { -32768, 0, 32767 };
    static const uint32_t au32[] = { 0, 1, UINT32_MAX };
    static const int32_t ai32[] = { INT32_MIN, -1, INT32_MAX };
    static const float af32[] = { 0.0f, -1.5f, 1e-45f, 3.4028234663852886e38f, 0.1f };
    static const uint8_t abool[] = { 1, 0, 1 };
    static const uint64_t au64[] = { 0, UINT64_MAX };
    static const int64_t ai64[] = { INT64_MIN, INT64_MAX, 0 };
    static const double af64[] = { 0.5, -0.0, 1e308, 5e-324 };
    static const rvl_str astr[] = {
        { "a", 1 }, { "", 0 }, { "\xc3\x9f\xe2\x88\x82", 5 }, { "tab\there", 8 },
        { "emoji \xf0\x9f\x98\x80", 10 },
    };
    int32_t along[1000];
    for (int i = 0; i < 1000; i++)
        along[i] = i * 7 - 3000;
    ARR("synth.arr.u8", RVL_GGUF_U8, au8);
    ARR("synth.arr.i8", RVL_GGUF_I8, ai8);
    ARR("synth.arr.u16", RVL_GGUF_U16, au16);
    ARR("synth.arr.i16", RVL_GGUF_I16, ai16);
    ARR("synth.arr.u32", RVL_GGUF_U32, au32);
    ARR("synth.arr.i32", RVL_GGUF_I32, ai32);
    ARR("synth.arr.f32", RVL_GGUF_F32, af32);
    ARR("synth.arr.bool", RVL_GGUF_BOOL, abool);
    assert_int_equal(rvl_gguf_writer_kv_str_arr(w, "synth.arr.string", astr, 5), 0);
    ARR("synth.arr.u64", RVL_GGUF_U64, au64);
    ARR("synth.arr.i64", RVL_GGUF_I64, ai64);
    ARR("synth.arr.f64", RVL_GGUF_F64, af64);
    ARR("synth.arr.long", RVL_GGUF_I32, along);

    uint8_t *data[N_SYNTH];
    for (size_t k = 0; k < N_SYNTH; k++) {
        const stensor *t = &synth_tensors[k];
        data[k] = pattern(tensor_bytes(t), k);
        assert_int_equal(rvl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne,
                                                    stream && k % 2 ? NULL : data[k]), 0);
    }
    assert_int_equal(rvl_gguf_writer_begin_data(w), 0);
    for (size_t k = 1; stream && k < N_SYNTH; k += 2) {
        uint64_t n = tensor_bytes(&synth_tensors[k]);
        for (uint64_t off = 0; off < n; off += 7)
            assert_int_equal(rvl_gguf_writer_tensor_data(w, k, data[k] + off,
                                                         n - off < 7 ? n - off : 7), 0);
    }
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    for (size_t k = 0; k < N_SYNTH; k++)
        free(data[k]);
}

/* Default alignment, no tensors. */
static void write_notensors(const char *path)
{
    rvl_gguf_writer *w;
    assert_int_equal(rvl_gguf_writer_open(&w, path), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "notensors"), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "a.u32", 7), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "a.string", "x"), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
}

/* ====================================================================
 * Copies of real files
 * ==================================================================== */

static void copy_gguf(const char *src, const char *dst)
{
    rvl_file *f;
    rvl_gguf_writer *w;
    if (rvl_file_open(&f, src) < 0) {
        print_error("%s (for the default model: make model)\n", rvl_errmsg());
        fail();
    }
    assert_int_equal(rvl_gguf_writer_open(&w, dst), 0);
    for (uint64_t i = 0; i < rvl_file_n_kv(f); i++) {
        int rc = rvl_gguf_writer_kv_copy(w, rvl_file_kv(f, i));
        if (rc)
            print_error("%s: kv %" PRIu64 ": %s\n", src, i, rvl_errmsg());
        assert_int_equal(rc, 0);
    }
    for (uint64_t i = 0; i < rvl_file_n_tensors(f); i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char name[256];
        assert_true(t->name.len < sizeof name);
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        int rc = rvl_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
        if (rc)
            print_error("%s: tensor %s: %s\n", src, name, rvl_errmsg());
        assert_int_equal(rc, 0);
    }
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    rvl_file_close(f);
}

/* Same pairs (keys, types, counts, bytes of every value) in the same
 * order, through our reader. */
static void assert_same_pairs(const char *a_path, const char *b_path)
{
    rvl_file *a, *b;
    assert_int_equal(rvl_file_open(&a, a_path), 0);
    assert_int_equal(rvl_file_open(&b, b_path), 0);
    assert_int_equal(rvl_file_n_kv(a), rvl_file_n_kv(b));
    assert_int_equal(rvl_file_n_tensors(a), rvl_file_n_tensors(b));
    assert_int_equal(rvl_file_alignment(a), rvl_file_alignment(b));
    assert_int_equal(rvl_file_data_offset(a), rvl_file_data_offset(b));
    for (uint64_t i = 0; i < rvl_file_n_kv(a); i++) {
        const rvl_kv *x = rvl_file_kv(a, i), *y = rvl_file_kv(b, i);
        assert_int_equal(x->key.len, y->key.len);
        assert_memory_equal(x->key.ptr, y->key.ptr, x->key.len);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->arr_type, y->arr_type);
        assert_int_equal(x->n, y->n);
        uint32_t vt = x->type == RVL_GGUF_ARRAY ? x->arr_type : x->type;
        if (vt == RVL_GGUF_STRING) {
            for (uint64_t j = 0; j < x->n; j++) {
                assert_int_equal(x->strs[j].len, y->strs[j].len);
                if (x->strs[j].len)
                    assert_memory_equal(x->strs[j].ptr, y->strs[j].ptr, x->strs[j].len);
            }
        } else if (x->n) {
            assert_memory_equal(x->data, y->data, x->n * rvl_gguf_vtype_size(vt));
        }
    }
    rvl_file_close(a);
    rvl_file_close(b);
}

/* ====================================================================
 * Tests
 * ==================================================================== */

static void test_writer_synthetic_matches_gguf_py_bytes(void **state)
{
    (void)state;
    write_synthetic(opath("synthetic.gguf"), false);
    assert_same_bytes(opath("synthetic.gguf"), "tests/ref/writer/synthetic.gguf");
}

static void test_writer_streamed_synthetic_matches_gguf_py_bytes(void **state)
{
    (void)state;
    write_synthetic(opath("synthetic-stream.gguf"), true);
    assert_same_bytes(opath("synthetic-stream.gguf"), "tests/ref/writer/synthetic.gguf");
}

static void test_writer_file_without_tensors_matches_gguf_py_bytes(void **state)
{
    (void)state;
    write_notensors(opath("synthetic-notensors.gguf"));
    assert_same_bytes(opath("synthetic-notensors.gguf"), "tests/ref/writer/synthetic-notensors.gguf");
}

static void test_writer_copy_of_default_model_is_byte_identical(void **state)
{
    (void)state;
    char src[4096];
    model_path(src, sizeof src);
    copy_gguf(src, opath(RVL_DEFAULT_MODEL_FILE));
    assert_same_bytes(opath(RVL_DEFAULT_MODEL_FILE), src);
}

static void test_writer_copy_of_vocab_file_adds_only_end_padding(void **state)
{
    (void)state;
    char pat[4096];
    glob_t gl;
    snprintf(pat, sizeof pat, "%s/tokenizers/*.gguf", shared_dir());
    assert_int_equal(glob(pat, 0, NULL, &gl), 0);
    assert_true(gl.gl_pathc > 0);
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        const char *src = gl.gl_pathv[i], *b = strrchr(src, '/');
        const char *dst = opath(b ? b + 1 : src);
        copy_gguf(src, dst);

        rvl_file *f;
        assert_int_equal(rvl_file_open(&f, src), 0);
        uint64_t align = rvl_file_alignment(f);
        assert_int_equal(rvl_file_n_tensors(f), 0);
        rvl_file_close(f);

        rvl_map o, c;
        assert_int_equal(rvl_map_file(&o, src), 0);
        assert_int_equal(rvl_map_file(&c, dst), 0);
        uint64_t want = (o.size + align - 1) / align * align;
        if (c.size != want || memcmp(o.base, c.base, (size_t)o.size) != 0)
            print_error("%s: copy is %" PRIu64 " bytes, original %" PRIu64 ", first difference"
                        " at %" PRId64 "\n", src, c.size, o.size, first_diff(&c, &o));
        assert_int_equal(c.size, want);
        assert_memory_equal(o.base, c.base, o.size);
        for (uint64_t j = o.size; j < c.size; j++)
            assert_int_equal(((const uint8_t *)c.base)[j], 0);
        printf("%s: copy identical%s\n", b ? b + 1 : src,
               c.size > o.size ? " up to the end padding the original lacks" : "");
        rvl_map_unmap(&o);
        rvl_map_unmap(&c);
        assert_same_pairs(src, dst);
    }
    globfree(&gl);
}

static int setup(void **state)
{
    (void)state;
    const char *d = getenv("RVL_WRITER_REF_OUT");
    if (d && *d) {
        keep = true;
        snprintf(outdir, sizeof outdir, "%s", d);
        mkdir(outdir, 0755);
        return 0;
    }
    const char *t = getenv("TMPDIR");
    snprintf(outdir, sizeof outdir, "%s/rvl-writer-ref.XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(outdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (keep)
        return 0;
    char pat[4200];
    glob_t gl;
    snprintf(pat, sizeof pat, "%s/*", outdir);
    if (glob(pat, 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc; i++)
            unlink(gl.gl_pathv[i]);
        globfree(&gl);
    }
    rmdir(outdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_synthetic_matches_gguf_py_bytes),
        cmocka_unit_test(test_writer_streamed_synthetic_matches_gguf_py_bytes),
        cmocka_unit_test(test_writer_file_without_tensors_matches_gguf_py_bytes),
        cmocka_unit_test(test_writer_copy_of_default_model_is_byte_identical),
        cmocka_unit_test(test_writer_copy_of_vocab_file_adds_only_end_padding),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
