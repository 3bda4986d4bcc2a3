/*
 * test_info_ref.c - our GGUF reader agrees with gguf-py on real files.
 *
 * tests/ref/gguf_info_ref.py read the default model and every GGUF file in
 * $RVL_SHARED_DATA/tokenizers with gguf-py and committed what it saw
 * to tests/ref/info/<file>.json: version, alignment, data offset, every
 * metadata pair (gguf-py type name, count, XXH3 digest of the value, the
 * value when short) and every tensor (type name and id, shape in ne order,
 * element and byte counts, absolute offset, XXH3 of its data). Here each
 * file is opened with rvl_file_open and every one of those facts is
 * recomputed from rvl_kv / rvl_tensor_info and compared. The digests use
 * the canonical serialization the script documents: fixed-size values as
 * their little-endian bytes, strings as u64 length + bytes, arrays as the
 * concatenation of their elements.
 *
 * Also: tests/ref/ggml_types.json (gguf-py's GGML_QUANT_SIZES) against
 * rvl_type_get(): same names, block sizes and bytes per block, except
 * where gguf-py is known to be stale (known_py_diff below).
 *
 * Run from the repository root (make check does). No Python needed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "ruvllm.h"

#define REF_DIR "tests/ref/info"

/* gguf-py's GGUFValueType names, by GGUF type id. */
static const char *const py_vtype[RVL_GGUF_VTYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL",
    "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

/* ====================================================================
 * Helpers
 * ==================================================================== */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, cap + 1);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = 0;
    return buf;
}

static cJSON *load_json(const char *path)
{
    char *text = slurp(path);
    if (!text) {
        print_error("%s: cannot read\n", path);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j)
        print_error("%s: not valid JSON\n", path);
    return j;
}

static void model_path(char *buf, size_t cap, const char *file)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/ruvllm/models/%s", xdg, file);
    else
        snprintf(buf, cap, "%s/.cache/ruvllm/models/%s", getenv("HOME") ? getenv("HOME") : ".", file);
}

static void shared_path(char *buf, size_t cap, const char *sub, const char *file)
{
    const char *d = getenv("RVL_SHARED_DATA");
    snprintf(buf, cap, "%s/%s/%s", d && *d ? d : "../shared/data", sub, file);
}

/* Mismatches are printed and counted, so one run shows all of them. */
static int nbad;
__attribute__((format(printf, 1, 2))) static void bad(const char *fmt, ...)
{
    va_list ap;
    char msg[1024];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error("%s\n", msg);
    nbad++;
}

static const cJSON *member(const cJSON *o, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

static bool json_u64(const cJSON *o, const char *name, uint64_t *v)
{
    const cJSON *j = member(o, name);
    if (cJSON_IsNumber(j) && j->valuedouble >= 0 && j->valuedouble < 9007199254740992.0) {
        *v = (uint64_t)j->valuedouble;
        return true;
    }
    if (cJSON_IsString(j)) {
        *v = strtoull(j->valuestring, NULL, 10);
        return true;
    }
    return false;
}

/* Compare a header number: golden member `name` with ours. */
static void check_u64(const char *file, const cJSON *g, const char *name, uint64_t ours)
{
    uint64_t want;
    if (!json_u64(g, name, &want))
        bad("%s: golden has no '%s'", file, name);
    else if (want != ours)
        bad("%s: %s: ours %" PRIu64 ", gguf-py %" PRIu64, file, name, ours, want);
}

/* ====================================================================
 * Canonical serialization + XXH3 (see tests/ref/gguf_info_ref.py)
 * ==================================================================== */

static uint64_t kv_digest(const rvl_kv *kv)
{
    uint32_t vt = kv->type == RVL_GGUF_ARRAY ? kv->arr_type : kv->type;
    uint64_t n = kv->type == RVL_GGUF_ARRAY ? kv->n : 1;
    XXH3_state_t *st = XXH3_createState();
    assert_non_null(st);
    XXH3_64bits_reset(st);
    if (vt == RVL_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len = kv->strs[i].len;
            XXH3_64bits_update(st, &len, 8);  /* little-endian host */
            XXH3_64bits_update(st, kv->strs[i].ptr, (size_t)len);
        }
    } else {
        XXH3_64bits_update(st, kv->data, (size_t)(n * rvl_gguf_vtype_size(vt)));
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

static bool digest_eq(const cJSON *o, uint64_t ours)
{
    const cJSON *j = member(o, "digest");
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, ours);
    return cJSON_IsString(j) && strcmp(j->valuestring, hex) == 0;
}

/* One element (index i) of kv against a golden JSON value. */
static void check_value(const char *file, const char *key, const rvl_kv *kv, uint64_t i,
                        const cJSON *want)
{
    uint32_t vt = kv->type == RVL_GGUF_ARRAY ? kv->arr_type : kv->type;
    const char *d = (const char *)kv->data;

    if (cJSON_IsNull(want))
        return;        /* the script leaves out long or non-UTF-8 strings */
    switch (vt) {
    case RVL_GGUF_STRING: {
        size_t wl = cJSON_IsString(want) ? strlen(want->valuestring) : 0;
        if (!cJSON_IsString(want) || wl != kv->strs[i].len ||
            memcmp(want->valuestring, kv->strs[i].ptr, wl) != 0)
            bad("%s: %s[%" PRIu64 "]: string differs from gguf-py's", file, key, i);
        return;
    }
    case RVL_GGUF_BOOL: {
        bool ours = d[i] != 0;
        if (!cJSON_IsBool(want) || cJSON_IsTrue(want) != ours)
            bad("%s: %s[%" PRIu64 "]: ours %s, gguf-py differs", file, key, i, ours ? "true" : "false");
        return;
    }
    case RVL_GGUF_F32:
    case RVL_GGUF_F64: {
        double ours;
        if (vt == RVL_GGUF_F32) {
            float f;
            memcpy(&f, d + i * 4, 4);
            ours = f;
        } else {
            memcpy(&ours, d + i * 8, 8);
        }
        double w = cJSON_IsNumber(want) ? want->valuedouble
                   : cJSON_IsString(want) ? strtod(want->valuestring, NULL) : NAN;
        bool same = (isnan(w) && isnan(ours)) || w == ours;
        if (!same)
            bad("%s: %s[%" PRIu64 "]: ours %.17g, gguf-py %.17g", file, key, i, ours, w);
        return;
    }
    case RVL_GGUF_U64: {
        uint64_t ours, w = 0;
        memcpy(&ours, d + i * 8, 8);
        if (cJSON_IsString(want))
            w = strtoull(want->valuestring, NULL, 10);
        else if (cJSON_IsNumber(want))
            w = (uint64_t)want->valuedouble;
        if (w != ours)
            bad("%s: %s[%" PRIu64 "]: ours %" PRIu64 ", gguf-py %" PRIu64, file, key, i, ours, w);
        return;
    }
    default: {
        int64_t ours = rvl_kv_arr_i64(kv, i), w = 0;
        if (cJSON_IsString(want))
            w = strtoll(want->valuestring, NULL, 10);
        else if (cJSON_IsNumber(want))
            w = (int64_t)want->valuedouble;
        if (w != ours)
            bad("%s: %s[%" PRIu64 "]: ours %" PRId64 ", gguf-py %" PRId64, file, key, i, ours, w);
    }
    }
}

/* ====================================================================
 * One golden
 * ==================================================================== */

static void check_kv(const char *file, uint64_t i, const rvl_kv *kv, const cJSON *g)
{
    const cJSON *key = member(g, "key"), *type = member(g, "type");
    char k[256];
    snprintf(k, sizeof k, "%.*s", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr);

    if (!cJSON_IsString(key) || !cJSON_IsString(type)) {
        bad("%s: golden metadata %" PRIu64 " has no key or type", file, i);
        return;
    }
    if (strlen(key->valuestring) != kv->key.len ||
        memcmp(key->valuestring, kv->key.ptr, kv->key.len) != 0) {
        bad("%s: metadata %" PRIu64 ": ours '%s', gguf-py '%s'", file, i, k, key->valuestring);
        return;
    }
    if (kv->type >= RVL_GGUF_VTYPE_COUNT || strcmp(py_vtype[kv->type], type->valuestring) != 0) {
        bad("%s: %s: type ours %s, gguf-py %s", file, k, rvl_gguf_vtype_name(kv->type),
            type->valuestring);
        return;
    }
    if (kv->type == RVL_GGUF_ARRAY) {
        const cJSON *et = member(g, "elem_type"), *head = member(g, "head");
        uint64_t count;
        if (!cJSON_IsString(et) || kv->arr_type >= RVL_GGUF_VTYPE_COUNT ||
            strcmp(py_vtype[kv->arr_type], et->valuestring) != 0) {
            bad("%s: %s: element type ours %s, gguf-py %s", file, k,
                rvl_gguf_vtype_name(kv->arr_type), cJSON_IsString(et) ? et->valuestring : "?");
            return;
        }
        if (!json_u64(g, "count", &count) || count != kv->n) {
            bad("%s: %s: count ours %" PRIu64 ", gguf-py %" PRIu64, file, k, kv->n, count);
            return;
        }
        uint64_t j = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, head) {
            if (j < kv->n)
                check_value(file, k, kv, j, e);
            j++;
        }
        if (j != (kv->n < 4 ? kv->n : 4))
            bad("%s: %s: golden shows %" PRIu64 " leading elements", file, k, j);
    } else {
        if (kv->type == RVL_GGUF_STRING) {
            uint64_t len;
            if (!json_u64(g, "len", &len) || len != kv->strs[0].len)
                bad("%s: %s: string length ours %" PRIu64 ", gguf-py differs", file, k,
                    kv->strs[0].len);
        }
        check_value(file, k, kv, 0, member(g, "value"));
    }
    if (!digest_eq(g, kv_digest(kv)))
        bad("%s: %s: value digest ours %016" PRIx64 " differs from gguf-py's", file, k,
            kv_digest(kv));
}

static void check_tensor(const char *file, uint64_t i, const rvl_tensor_info *t, const cJSON *g)
{
    const cJSON *name = member(g, "name"), *type = member(g, "type"), *shape = member(g, "shape");
    const rvl_type_info *ti = rvl_type_get(t->type);
    char n[256];
    uint64_t v;
    snprintf(n, sizeof n, "%.*s", (int)(t->name.len > 200 ? 200 : t->name.len), t->name.ptr);

    if (!cJSON_IsString(name) || strlen(name->valuestring) != t->name.len ||
        memcmp(name->valuestring, t->name.ptr, t->name.len) != 0) {
        bad("%s: tensor %" PRIu64 ": ours '%s', gguf-py '%s'", file, i, n,
            cJSON_IsString(name) ? name->valuestring : "?");
        return;
    }
    if (!cJSON_IsString(type) || !ti || strcmp(ti->name, type->valuestring) != 0)
        bad("%s: %s: type ours %s, gguf-py %s", file, n, ti ? ti->name : "?",
            cJSON_IsString(type) ? type->valuestring : "?");
    if (!json_u64(g, "type_id", &v) || v != t->type)
        bad("%s: %s: type id ours %" PRIu32 ", gguf-py %" PRIu64, file, n, t->type, v);
    if (!cJSON_IsArray(shape) || (uint64_t)cJSON_GetArraySize(shape) != t->n_dims) {
        bad("%s: %s: %" PRIu32 " dimensions, gguf-py %d", file, n, t->n_dims,
            cJSON_GetArraySize(shape));
    } else {
        for (uint32_t d = 0; d < t->n_dims; d++) {
            const cJSON *e = cJSON_GetArrayItem(shape, (int)d);
            if (!cJSON_IsNumber(e) || (uint64_t)e->valuedouble != t->ne[d])
                bad("%s: %s: ne[%" PRIu32 "] ours %" PRIu64 ", gguf-py differs", file, n, d,
                    t->ne[d]);
        }
    }
    check_u64(file, g, "n_elements", t->n_elements);
    check_u64(file, g, "n_bytes", t->nbytes);
    check_u64(file, g, "offset", t->offset);
    if (!digest_eq(g, XXH3_64bits(t->data, (size_t)t->nbytes)))
        bad("%s: %s: data digest differs from gguf-py's", file, n);
}

/* Check one file against its golden; returns the number of mismatches. */
static int check_golden(const char *golden)
{
    char path[4096];
    cJSON *g = load_json(golden);
    rvl_file *f = NULL;

    nbad = 0;
    if (!g)
        return 1;
    const cJSON *file = member(g, "file"), *source = member(g, "source");
    if (!cJSON_IsString(file) || !cJSON_IsString(source)) {
        cJSON_Delete(g);
        bad("%s: no file/source", golden);
        return nbad;
    }
    const char *fn = file->valuestring;
    if (strcmp(source->valuestring, "model") == 0)
        model_path(path, sizeof path, fn);
    else
        shared_path(path, sizeof path, source->valuestring, fn);

    int rc = rvl_file_open(&f, path);
    if (rc < 0) {
        bad("%s: cannot open: %s (for the default model: make model)", path, rvl_errmsg());
        cJSON_Delete(g);
        return nbad;
    }
    check_u64(fn, g, "size", rvl_file_size(f));
    check_u64(fn, g, "version", rvl_file_version(f));
    check_u64(fn, g, "alignment", rvl_file_alignment(f));
    check_u64(fn, g, "data_offset", rvl_file_data_offset(f));
    check_u64(fn, g, "n_kv", rvl_file_n_kv(f));
    check_u64(fn, g, "n_tensors", rvl_file_n_tensors(f));

    const cJSON *meta = member(g, "metadata"), *tens = member(g, "tensors");
    if ((uint64_t)cJSON_GetArraySize(meta) != rvl_file_n_kv(f) ||
        (uint64_t)cJSON_GetArraySize(tens) != rvl_file_n_tensors(f)) {
        bad("%s: golden lists %d pairs and %d tensors, ours %" PRIu64 " and %" PRIu64, fn,
            cJSON_GetArraySize(meta), cJSON_GetArraySize(tens), rvl_file_n_kv(f),
            rvl_file_n_tensors(f));
    } else {
        uint64_t i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, meta) {
            check_kv(fn, i, rvl_file_kv(f, i), e);
            i++;
        }
        i = 0;
        cJSON_ArrayForEach(e, tens) {
            check_tensor(fn, i, rvl_file_tensor(f, i), e);
            i++;
        }
        printf("%s: %" PRIu64 " pairs, %" PRIu64 " tensors checked, %d mismatches\n", fn,
               rvl_file_n_kv(f), rvl_file_n_tensors(f), nbad);
    }
    rvl_file_close(f);
    cJSON_Delete(g);
    return nbad;
}

/* ====================================================================
 * Tests
 * ==================================================================== */

static void test_reader_matches_gguf_py_on_default_model(void **state)
{
    (void)state;
    assert_int_equal(check_golden(REF_DIR "/" RVL_DEFAULT_MODEL_FILE ".json"), 0);
}

static void test_reader_matches_gguf_py_on_tokenizer_files(void **state)
{
    (void)state;
    char pat[4096];
    glob_t gl;
    int total = 0;

    shared_path(pat, sizeof pat, "tokenizers", "*.gguf");
    assert_int_equal(glob(pat, 0, NULL, &gl), 0);
    assert_true(gl.gl_pathc > 0);
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        const char *b = strrchr(gl.gl_pathv[i], '/');
        char golden[4096];
        snprintf(golden, sizeof golden, "%s/%s.json", REF_DIR, b ? b + 1 : gl.gl_pathv[i]);
        total += check_golden(golden);   /* a missing golden counts as a mismatch */
    }
    globfree(&gl);
    assert_int_equal(total, 0);
}

/* The digests really change when a value does: a flipped byte in a copy
 * of a string array is caught. */
static void test_digest_sees_one_changed_byte(void **state)
{
    (void)state;
    char s0[] = "hello", s1[] = "w";
    rvl_str strs[2] = { { s0, 5 }, { s1, 1 } };
    rvl_kv kv = { .type = RVL_GGUF_ARRAY, .arr_type = RVL_GGUF_STRING, .n = 2, .strs = strs };
    uint64_t a = kv_digest(&kv);
    s0[4] = 'p';
    assert_int_not_equal(a, kv_digest(&kv));
    /* ["hell", "ow"] must not collide with ["hello", "w"]: lengths count */
    rvl_str other[2] = { { "hell", 4 }, { "ow", 2 } };
    s0[4] = 'o';
    kv.strs = other;
    assert_int_not_equal(a, kv_digest(&kv));
}

/* Where gguf-py's GGML_QUANT_SIZES disagrees with ggml itself. Q8_1:
 * gguf-py says 4 + 4 + 32 = 40 bytes (an early layout with float d and s);
 * ggml's block_q8_1 is two halves (d, s) and 32 int8 = 36 bytes. Q8_1 is
 * an intermediate format of dot products, never stored in model files. */
static bool known_py_diff(uint64_t id, uint64_t bs, uint64_t ts, const rvl_type_info *ti)
{
    return id == RVL_TYPE_Q8_1 && bs == 32 && ts == 40 && ti->block_size == 32 &&
           ti->type_size == 36;
}

static void test_type_table_matches_gguf_py(void **state)
{
    (void)state;
    cJSON *g = load_json("tests/ref/ggml_types.json");
    const cJSON *e;
    assert_non_null(g);
    nbad = 0;
    int n = 0;
    cJSON_ArrayForEach(e, g) {
        const cJSON *name = member(e, "name");
        uint64_t id, bs, ts;
        if (!cJSON_IsString(name) || !json_u64(e, "id", &id) || !json_u64(e, "block_size", &bs) ||
            !json_u64(e, "type_size", &ts)) {
            bad("ggml_types.json: malformed entry %d", n);
            continue;
        }
        const rvl_type_info *ti = rvl_type_get((uint32_t)id);
        if (!ti)
            bad("type %" PRIu64 " (%s): unknown to rvl_type_get", id, name->valuestring);
        else if (strcmp(ti->name, name->valuestring) ||
                 ((ti->block_size != bs || ti->type_size != ts) && !known_py_diff(id, bs, ts, ti)))
            bad("type %" PRIu64 ": ours %s %" PRIu32 "/%" PRIu32 ", gguf-py %s %" PRIu64 "/%" PRIu64,
                id, ti->name, ti->block_size, ti->type_size, name->valuestring, bs, ts);
        if (rvl_type_from_name(name->valuestring) != (int)id)
            bad("rvl_type_from_name(\"%s\") is not %" PRIu64, name->valuestring, id);
        n++;
    }
    cJSON_Delete(g);
    assert_true(n >= 30);
    assert_int_equal(nbad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_matches_gguf_py_on_default_model),
        cmocka_unit_test(test_reader_matches_gguf_py_on_tokenizer_files),
        cmocka_unit_test(test_digest_sees_one_changed_byte),
        cmocka_unit_test(test_type_table_matches_gguf_py),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
