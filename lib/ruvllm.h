/*
 * ruvllm.h - the one public header of libruvllm.
 *
 * Conventions (see docs/ and ../shared/STYLE.md):
 *  - Functions return 0 on success or a negative RVL_E* code. A human-readable
 *    detail message for the last failure on this thread is in rvl_errmsg().
 *  - lib/ never prints and never exits.
 *  - "owned: free with X" / "borrowed: valid until Y" on every pointer result.
 *  - Pairs rvl_x_open / rvl_x_close; close accepts NULL.
 */
#ifndef RUVLLM_H
#define RUVLLM_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RVL_VERSION "0.1.0"

/* ======================================================================
 * Errors. Values are pinned: they appear in tests and may be scripted.
 * ====================================================================== */
enum {
    RVL_OK = 0,
    RVL_ENOMEM = -1,       /* allocation failed */
    RVL_EIO = -2,          /* read/write/open failed (errno-based detail) */
    RVL_EFORMAT = -3,      /* malformed or hostile file content */
    RVL_EINVAL = -4,       /* bad argument from the caller */
    RVL_EUNSUPPORTED = -5, /* valid but not supported (yet) */
    RVL_EINTR = -6,        /* interrupted (Ctrl-C) */
    RVL_ENOTFOUND = -7,    /* key, tensor or file not found */
    RVL_ERANGE = -8,       /* value out of range / overflow */
};

/* Thread-local detail of the last error: borrowed, valid until the next
 * failing call on this thread. Never NULL (empty string when none). */
const char *rvl_errmsg(void);
/* Short name of an error code ("format error", ...). Static string. */
const char *rvl_strerror(int code);
/* Set the thread-local detail message; returns `code` so callers can write
 * `return rvl_seterr(RVL_EFORMAT, "%s: ...", path);` */
int rvl_seterr(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current message: "<prefix>: <old message>". Returns code. */
int rvl_preerr(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ======================================================================
 * Overflow-safe arithmetic for sizes read from hostile files.
 * Each returns true on overflow (and leaves *r unspecified).
 * ====================================================================== */
static inline bool rvl_add_ovf(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_add_overflow(a, b, r);
}
static inline bool rvl_mul_ovf(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_mul_overflow(a, b, r);
}

/* ======================================================================
 * Interruption (Ctrl-C). cmd/ installs the handler; long-running lib/
 * loops poll rvl_interrupted() and return RVL_EINTR.
 * ====================================================================== */
void rvl_interrupt_install(void);   /* SIGINT/SIGTERM -> flag; second Ctrl-C exits 130 */
bool rvl_interrupted(void);
void rvl_interrupt_clear(void);

/* ======================================================================
 * Atomic output files: write to a temporary file in the destination's
 * directory, fsync, rename into place. Registered temporaries are removed
 * by the signal handler if the process is interrupted, so Ctrl-C never
 * leaves a partial file at the destination or a stray temporary.
 * ====================================================================== */
typedef struct rvl_afile rvl_afile;
/* owned: finish with rvl_afile_commit or rvl_afile_abort. */
int rvl_afile_open(rvl_afile **out, const char *dest_path);
int rvl_afile_write(rvl_afile *f, const void *buf, size_t n);
/* Write zero bytes until the file offset is a multiple of `align`. */
int rvl_afile_pad(rvl_afile *f, uint64_t align);
uint64_t rvl_afile_tell(const rvl_afile *f);
int rvl_afile_seek(rvl_afile *f, uint64_t off); /* absolute; for patching headers */
/* fsync, rename to dest, fsync directory; frees f (also on failure). */
int rvl_afile_commit(rvl_afile *f);
/* Remove the temporary; frees f. Accepts NULL. */
void rvl_afile_abort(rvl_afile *f);

/* ======================================================================
 * Tensor element types. Values 0..39 are ggml's type ids (GGUF tensor
 * type field); do not renumber. Project-only formats start at 1024 and
 * are marked in GGUF metadata as "ruvllm.*". U8 and BOOL exist only for
 * safetensors.
 * ====================================================================== */
typedef enum {
    RVL_TYPE_F32 = 0,
    RVL_TYPE_F16 = 1,
    RVL_TYPE_Q4_0 = 2,
    RVL_TYPE_Q4_1 = 3,
    /* 4, 5: removed Q4_2, Q4_3 */
    RVL_TYPE_Q5_0 = 6,
    RVL_TYPE_Q5_1 = 7,
    RVL_TYPE_Q8_0 = 8,
    RVL_TYPE_Q8_1 = 9,
    RVL_TYPE_Q2_K = 10,
    RVL_TYPE_Q3_K = 11,
    RVL_TYPE_Q4_K = 12,
    RVL_TYPE_Q5_K = 13,
    RVL_TYPE_Q6_K = 14,
    RVL_TYPE_Q8_K = 15,
    RVL_TYPE_IQ2_XXS = 16,
    RVL_TYPE_IQ2_XS = 17,
    RVL_TYPE_IQ3_XXS = 18,
    RVL_TYPE_IQ1_S = 19,
    RVL_TYPE_IQ4_NL = 20,
    RVL_TYPE_IQ3_S = 21,
    RVL_TYPE_IQ2_S = 22,
    RVL_TYPE_IQ4_XS = 23,
    RVL_TYPE_I8 = 24,
    RVL_TYPE_I16 = 25,
    RVL_TYPE_I32 = 26,
    RVL_TYPE_I64 = 27,
    RVL_TYPE_F64 = 28,
    RVL_TYPE_IQ1_M = 29,
    RVL_TYPE_BF16 = 30,
    /* 31..33: removed Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 */
    RVL_TYPE_TQ1_0 = 34,
    RVL_TYPE_TQ2_0 = 35,
    /* 36..38: removed IQ4_NL_4_4, _4_8, _8_8 */
    RVL_TYPE_MXFP4 = 39,
    RVL_TYPE_NVFP4 = 40,
    RVL_TYPE_Q1_0 = 41,
    RVL_TYPE_GGML_COUNT = 42,

    /* safetensors-only element types */
    RVL_TYPE_U8 = 1000,
    RVL_TYPE_BOOL = 1001,

    /* ruvllm project formats (issue 3 fills their kernels) */
    RVL_TYPE_RVL_FIRST = 1024,
} rvl_type;

typedef struct {
    const char *name;       /* "Q4_K", as llama.cpp/gguf-py spell it */
    uint32_t block_size;    /* elements per block (1 for plain types) */
    uint32_t type_size;     /* bytes per block */
    bool quantized;
} rvl_type_info;

/* borrowed: static table entry, or NULL for an unknown/removed type id. */
const rvl_type_info *rvl_type_get(uint32_t type);
/* Bytes for `n` elements (one row); fails with RVL_EFORMAT if n is not a
 * multiple of the block size, RVL_ERANGE on overflow. */
int rvl_type_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);
/* Type by name (case-insensitive); -1 when unknown. */
int rvl_type_from_name(const char *name);

/* ======================================================================
 * Strings borrowed from a mapped file: not NUL-terminated.
 * ====================================================================== */
typedef struct {
    const char *ptr;
    uint64_t len;
} rvl_str;

/* ======================================================================
 * Model files: GGUF (v2, v3) and safetensors (single file or a sharded
 * Hugging Face directory through model.safetensors.index.json), mapped
 * read-only. Every count, length and offset is validated before use.
 * ====================================================================== */

/* GGUF metadata value types (pinned by the GGUF spec). */
typedef enum {
    RVL_GGUF_U8 = 0, RVL_GGUF_I8 = 1, RVL_GGUF_U16 = 2, RVL_GGUF_I16 = 3,
    RVL_GGUF_U32 = 4, RVL_GGUF_I32 = 5, RVL_GGUF_F32 = 6, RVL_GGUF_BOOL = 7,
    RVL_GGUF_STRING = 8, RVL_GGUF_ARRAY = 9, RVL_GGUF_U64 = 10,
    RVL_GGUF_I64 = 11, RVL_GGUF_F64 = 12,
    RVL_GGUF_VTYPE_COUNT = 13,
} rvl_gguf_vtype;

const char *rvl_gguf_vtype_name(uint32_t vtype); /* "u32", "string", "array", ... */
/* Size in bytes of one element of a fixed-size vtype; 0 for string/array. */
size_t rvl_gguf_vtype_size(uint32_t vtype);

typedef struct {
    rvl_str key;
    uint32_t type;        /* rvl_gguf_vtype */
    uint32_t arr_type;    /* element type when type == ARRAY */
    uint64_t n;           /* element count for arrays; 1 otherwise */
    const void *data;     /* borrowed: scalar or first array element in the
                             map (may be unaligned: read via memcpy or the
                             accessors below). For STRING scalars: chars. */
    const rvl_str *strs;  /* for STRING arrays and the STRING scalar (n
                             entries): borrowed, owned by the file */
    uint64_t offset;      /* byte offset of the key in the file */
} rvl_kv;

#define RVL_MAX_DIMS 8

typedef struct {
    rvl_str name;
    uint32_t type;               /* rvl_type */
    uint32_t n_dims;
    uint64_t ne[RVL_MAX_DIMS];   /* GGUF order: ne[0] is the innermost
                                    (contiguous) dimension. safetensors
                                    shapes are stored reversed to match. */
    uint64_t n_elements;
    uint64_t offset;             /* absolute byte offset in its file */
    uint64_t nbytes;
    const void *data;            /* borrowed: valid until rvl_file_close */
    uint32_t shard;              /* index of the shard file (safetensors) */
} rvl_tensor_info;

typedef enum { RVL_FMT_GGUF = 1, RVL_FMT_SAFETENSORS = 2 } rvl_file_format;

typedef struct rvl_file rvl_file;

/* Open a GGUF file, a .safetensors file, a model.safetensors.index.json or
 * a directory holding one of those (format detected from content).
 * owned: close with rvl_file_close. */
int rvl_file_open(rvl_file **out, const char *path);
void rvl_file_close(rvl_file *f);

rvl_file_format rvl_file_fmt(const rvl_file *f);
const char *rvl_file_path(const rvl_file *f);
uint64_t rvl_file_size(const rvl_file *f);      /* total bytes of all shards */
uint32_t rvl_file_version(const rvl_file *f);   /* GGUF version; 0 for safetensors */
uint64_t rvl_file_alignment(const rvl_file *f); /* GGUF; 0 for safetensors */
uint64_t rvl_file_data_offset(const rvl_file *f); /* start of tensor data (GGUF) */

uint64_t rvl_file_n_kv(const rvl_file *f);
const rvl_kv *rvl_file_kv(const rvl_file *f, uint64_t i);
const rvl_kv *rvl_file_find_kv(const rvl_file *f, const char *key); /* NULL if absent */

uint64_t rvl_file_n_tensors(const rvl_file *f);
const rvl_tensor_info *rvl_file_tensor(const rvl_file *f, uint64_t i);
const rvl_tensor_info *rvl_file_find_tensor(const rvl_file *f, const char *name);

/* Typed metadata accessors: RVL_ENOTFOUND when absent, RVL_EFORMAT when
 * the stored type cannot be converted losslessly. */
int rvl_kv_get_u64(const rvl_kv *kv, uint64_t *v);  /* any integer type >= 0, bool */
int rvl_kv_get_i64(const rvl_kv *kv, int64_t *v);   /* any integer type */
int rvl_kv_get_f64(const rvl_kv *kv, double *v);    /* any numeric type */
int rvl_kv_get_str(const rvl_kv *kv, rvl_str *v);   /* STRING scalar */
/* Element i of a numeric array as double / int64. */
double rvl_kv_arr_f64(const rvl_kv *kv, uint64_t i);
int64_t rvl_kv_arr_i64(const rvl_kv *kv, uint64_t i);
/* Compare an rvl_str with a C string. */
bool rvl_str_eq(rvl_str s, const char *c);

/* ---------------- GGUF reader internals used by rvl_file ---------------- */
/* Parse a GGUF image of `size` bytes at `base` (already mapped).
 * `name` is used in error messages. */
typedef struct rvl_gguf rvl_gguf;
int rvl_gguf_parse(rvl_gguf **out, const void *base, uint64_t size, const char *name);
void rvl_gguf_free(rvl_gguf *g);

/* ======================================================================
 * GGUF writer. Streams to an rvl_afile; nothing appears at the
 * destination until rvl_gguf_writer_finish succeeds.
 *
 *   rvl_gguf_writer_open(&w, path);
 *   rvl_gguf_writer_kv_*(w, ...);                 metadata, in order
 *   rvl_gguf_writer_add_tensor(w, name, type, n_dims, ne, data_or_NULL);
 *   rvl_gguf_writer_begin_data(w);                writes header + infos
 *   rvl_gguf_writer_tensor_data(w, i, buf, n);    for tensors added with
 *                                                 NULL data, in order
 *   rvl_gguf_writer_finish(w);                    pads, fsyncs, renames
 * ====================================================================== */
typedef struct rvl_gguf_writer rvl_gguf_writer;
int rvl_gguf_writer_open(rvl_gguf_writer **out, const char *path);
/* Set general.alignment (default 32); must precede begin_data. */
int rvl_gguf_writer_set_alignment(rvl_gguf_writer *w, uint32_t align);
int rvl_gguf_writer_kv_u32(rvl_gguf_writer *w, const char *key, uint32_t v);
int rvl_gguf_writer_kv_i32(rvl_gguf_writer *w, const char *key, int32_t v);
int rvl_gguf_writer_kv_u64(rvl_gguf_writer *w, const char *key, uint64_t v);
int rvl_gguf_writer_kv_f32(rvl_gguf_writer *w, const char *key, float v);
int rvl_gguf_writer_kv_bool(rvl_gguf_writer *w, const char *key, bool v);
int rvl_gguf_writer_kv_str(rvl_gguf_writer *w, const char *key, const char *v);
/* Numeric array of `n` elements of `arr_type` from `data` (copied). */
int rvl_gguf_writer_kv_arr(rvl_gguf_writer *w, const char *key,
                           uint32_t arr_type, const void *data, uint64_t n);
int rvl_gguf_writer_kv_str_arr(rvl_gguf_writer *w, const char *key,
                               const rvl_str *strs, uint64_t n);
/* Copy a metadata pair from a parsed file, whatever its type. */
int rvl_gguf_writer_kv_copy(rvl_gguf_writer *w, const rvl_kv *kv);
/* `data` is borrowed until finish (NULL: supplied later by tensor_data). */
int rvl_gguf_writer_add_tensor(rvl_gguf_writer *w, const char *name,
                               uint32_t type, uint32_t n_dims,
                               const uint64_t *ne, const void *data);
int rvl_gguf_writer_begin_data(rvl_gguf_writer *w);
int rvl_gguf_writer_tensor_data(rvl_gguf_writer *w, uint64_t i,
                                const void *buf, uint64_t n);
int rvl_gguf_writer_finish(rvl_gguf_writer *w);   /* frees w */
void rvl_gguf_writer_abort(rvl_gguf_writer *w);   /* frees w; accepts NULL */

/* ======================================================================
 * safetensors writer (one file). Tensor shapes are given in safetensors
 * order (outermost first). Written atomically.
 * ====================================================================== */
typedef struct rvl_st_writer rvl_st_writer;
int rvl_st_writer_open(rvl_st_writer **out, const char *path);
int rvl_st_writer_meta(rvl_st_writer *w, const char *key, const char *value);
/* `data` borrowed until finish. type: F64/F32/F16/BF16/I64/I32/I16/I8/U8/BOOL. */
int rvl_st_writer_add(rvl_st_writer *w, const char *name, uint32_t type,
                      uint32_t n_dims, const uint64_t *shape, const void *data);
int rvl_st_writer_finish(rvl_st_writer *w);  /* frees w */
void rvl_st_writer_abort(rvl_st_writer *w);  /* frees w; accepts NULL */

/* ======================================================================
 * Default model location.
 * ====================================================================== */
#define RVL_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
/* Resolve the model path: explicit (may be NULL), then $RUVLLM_MODEL, then
 * ${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/<default>. Writes into buf.
 * Returns RVL_ENOTFOUND (with a message naming `make model`) when the
 * default model is missing. */
int rvl_model_path(const char *explicit_path, char *buf, size_t cap);

/* ======================================================================
 * CPU features (filled once at start-up; issue 3 extends dispatch).
 * ====================================================================== */
typedef struct {
    bool sse3, ssse3, avx, avx2, fma, f16c, avx512f, avx512bw, avx512vl,
         avx512vnni, avx512bf16, neon, dotprod;
} rvl_cpu_features;
const rvl_cpu_features *rvl_cpu(void);
/* Name of the kernel ISA selected at run time ("avx2", "ref", ...),
 * honoring RUVLLM_ISA. */
const char *rvl_isa_selected(void);
/* 0 when `isa` names a variant this binary has and this CPU can run;
 * RVL_EINVAL for an unknown name, RVL_EUNSUPPORTED otherwise. */
int rvl_isa_check(const char *isa);

/* ======================================================================
 * JSON output (--json): a streaming writer to a caller-owned FILE*.
 * Invalid UTF-8 in strings becomes U+FFFD; integers print exactly.
 * ====================================================================== */
#include <stdio.h>
#define RVL_JW_MAX_DEPTH 32
typedef struct {
    FILE *out;
    bool pretty;
    bool after_key;
    int depth;
    uint64_t count[RVL_JW_MAX_DEPTH];
} rvl_jw;
void rvl_jw_init(rvl_jw *w, FILE *out, bool pretty);
void rvl_jw_obj(rvl_jw *w);
void rvl_jw_obj_end(rvl_jw *w);
void rvl_jw_arr(rvl_jw *w);
void rvl_jw_arr_end(rvl_jw *w);
void rvl_jw_key(rvl_jw *w, const char *k);
void rvl_jw_keyn(rvl_jw *w, const char *k, size_t n);
void rvl_jw_str(rvl_jw *w, const char *s);       /* NULL -> null */
void rvl_jw_strn(rvl_jw *w, const char *s, size_t n);
void rvl_jw_u64(rvl_jw *w, uint64_t v);
void rvl_jw_i64(rvl_jw *w, int64_t v);
void rvl_jw_f64(rvl_jw *w, double v);            /* %.17g; non-finite -> null */
void rvl_jw_f32(rvl_jw *w, float v);             /* %.9g: round-trips a float */
void rvl_jw_bool(rvl_jw *w, bool v);
void rvl_jw_null(rvl_jw *w);

#ifdef __cplusplus
}
#endif
#endif /* RUVLLM_H */
