/*
 * ruvllm_tools.h - the tools half of libruvllm's public API: what the
 * offline commands need beyond the core (ruvllm.h): GGUF and safetensors
 * writers, conversion (quantize, dequant, Hugging Face import), LoRA merge,
 * session-file inspection (kv-inspect), bench (kernels, model speed,
 * perplexity), and pulling models from the Hugging Face Hub. Same conventions as ruvllm.h.
 */
#ifndef RUVLLM_TOOLS_H
#define RUVLLM_TOOLS_H

#include "ruvllm.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 *
 * Version 3, byte-identical to gguf-py's GGUFWriter for the same keys and
 * tensors in the same order. Duplicate keys or tensor names, names of 64
 * bytes or more (llama.cpp's limit), n_dims outside 1..4 and rows that are
 * not whole blocks are refused with RVL_EINVAL. An I/O failure is sticky:
 * later calls repeat it and finish removes the temporary.
 * ====================================================================== */
typedef struct rvl_gguf_writer rvl_gguf_writer;
int rvl_gguf_writer_open(rvl_gguf_writer **out, const char *path);
/* Set general.alignment (default 32; a power of two); must precede
 * begin_data. Written as a u32 key where first set (as gguf-py does); a
 * later call updates the value in place. kv_u32 or kv_copy of
 * "general.alignment" does the same. */
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
/* Stream data of tensor i (added with NULL data), in index order; a
 * tensor may come in several chunks, never more than its size. Tensors
 * with data (and empty ones) are written automatically around these. */
int rvl_gguf_writer_tensor_data(rvl_gguf_writer *w, uint64_t i,
                                const void *buf, uint64_t n);
/* Calls begin_data if needed, checks every tensor is complete, pads the
 * end to the alignment, commits. On failure nothing is left at the
 * destination. Frees w either way. */
int rvl_gguf_writer_finish(rvl_gguf_writer *w);
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
 * Conversion (lib/convert/): the offline work behind
 * `ruvllm dequant` and `ruvllm quantize`. Outputs are written atomically
 * (rvl_afile): on any failure, or RVL_EINTR when rvl_interrupted() turns
 * true, nothing is left at the destination.
 * ====================================================================== */
typedef struct {
    uint64_t tensor;        /* index of the tensor being converted (0-based) */
    uint64_t n_tensors;
    const char *name;       /* its name; borrowed, valid during the call */
    uint32_t type_in, type_out;         /* its type in the input and the output */
    uint32_t n_dims;
    const uint64_t *ne;     /* its shape (GGUF order); borrowed, during the call */
    uint64_t done, total;   /* input tensor bytes converted so far / in all */
} rvl_convert_progress;
/* Called before each tensor (tensor < n_tensors) and once at the end
 * (tensor == n_tensors, name "", done == total). */
typedef void (*rvl_convert_progress_fn)(void *ud, const rvl_convert_progress *p);

/* Refuse writing `out` over `in` (the same file, through any path): 0 when
 * they differ or `out` does not exist yet, RVL_EINVAL otherwise. */
int rvl_convert_check_paths(const char *in, const char *out);

/* What a model file's mixture of experts and latent attention amount to
 * (for `ruvllm info`), from its GGUF keys and tensor names. Parameters are
 * tensor elements: the routed experts' are those of the ffn_*_exps
 * tensors (weights and biases), the shared experts' those of ffn_*_shexp;
 * a token computes with every other parameter, the shared experts
 * included, and n_expert_used / n_expert of the routed experts'. The KV
 * bytes are per token over all layers in f16: the latent cache of MLA
 * (kv_lora_rank + rope.dimension_count values a layer, the key; the value
 * is the latent's first kv_lora_rank of them, not kept twice, as llama.cpp
 * caches it) and the per-head cache the same model would need without it
 * (head_count x (key_length_mla + value_length_mla)). */
typedef struct {
    uint64_t params;                /* all tensors' elements */
    /* mixtures of experts: n_expert 0 for a dense model (the rest 0 too) */
    uint32_t n_expert, n_expert_used;
    uint32_t n_expert_shared;       /* expert_shared_count, or 1 when ffn_*_shexp without it */
    uint32_t n_dense_lead;          /* leading_dense_block_count */
    uint64_t expert_params, shared_params, active_params;
    /* multi-head latent attention (deepseek2): false and 0 otherwise */
    bool mla;
    uint32_t n_layer, n_head, q_lora_rank, kv_lora_rank, rope_dim, key_length_mla, value_length_mla;
    uint64_t kv_bytes_latent, kv_bytes_per_head;
} rvl_model_summary;

/* Fill *s from f (any model file; a safetensors one has no keys: params
 * only). Never fails on a well-formed file: 0. */
int rvl_convert_summary(const rvl_file *f, rvl_model_summary *s);

typedef struct {
    uint32_t type;          /* RVL_TYPE_F32, RVL_TYPE_F16 or RVL_TYPE_BF16 */
    rvl_convert_progress_fn progress;   /* may be NULL */
    void *ud;
} rvl_dequant_params;

/* GGUF (or a Hugging Face directory, imported as by rvl_quantize_gguf) in
 * -> GGUF out with every float or quantized tensor of two or more
 * dimensions in p->type and 1-D tensors (norms, biases) in F32, as
 * llama.cpp keeps them; integer tensors are copied. Metadata is copied in
 * order with general.file_type set to the new type (0, 1 or 32). Values are
 * the format's dequantize kernel's floats, rounded to F16/BF16 as the F16/
 * BF16 quantizers round. */
int rvl_dequant_gguf(const char *in, const char *out, const rvl_dequant_params *p);
/* GGUF in -> a Hugging Face model directory `out` (created; an existing
 * one must be empty) holding config.json, model.safetensors (matrices in
 * p->type, 1-D tensors in F32, Q/K rows back in Hugging Face's order for
 * llama), tokenizer.json and tokenizer_config.json (with the chat
 * template), which transformers loads. Architectures llama and qwen2 with
 * a byte-level BPE vocabulary (gpt2: gpt-2, smollm/starcoder, llama-bpe,
 * qwen2 pre-tokenizers) or a SentencePiece BPE one (llama: merges derived
 * from the scores); others fail with RVL_EUNSUPPORTED. Written into a
 * temporary directory renamed into place at the end. */
int rvl_dequant_hf(const char *in, const char *out, const rvl_dequant_params *p);

/* Quantization mixes: llama.cpp's file types by llama-quantize's names
 * (Q4_K_M, Q8_0, ...; the aliases Q3_K, Q4_K, Q5_K mean the _M mixes),
 * F32/F16/BF16, and the project formats by type name (RVL_I4S_G64, ...;
 * plain: no per-tensor rules). */
typedef struct {
    const char *name;       /* "Q4_K_M" */
    uint32_t ftype;         /* general.file_type (llama_ftype); UINT32_MAX: none */
    uint32_t type;          /* the tensor type most tensors get (rvl_type) */
    bool llama_rules;       /* llama.cpp's per-tensor rules apply */
    const char *desc;       /* "4.89 bpw mix (Q4_K, Q6_K for output, ...)" */
} rvl_qmix;
/* borrowed: static entry. NULL when unknown (case-insensitive name). */
const rvl_qmix *rvl_qmix_find(const char *name);
/* Iterate the supported mixes: i = 0.. until NULL. */
const rvl_qmix *rvl_qmix_at(size_t i);

/* What the per-tensor rules need to know about the model and the run. */
typedef struct {
    const rvl_qmix *mix;
    const char *arch;       /* general.architecture */
    uint32_t n_layer, n_head, n_head_kv, n_expert;
    bool is_70b;            /* llama with 80 layers and GQA (attn_v gets Q5_K) */
    bool has_imatrix;
    bool pure;              /* --pure: the mix's type everywhere (still with fallbacks) */
    bool leave_output;      /* --leave-output: output.weight is not quantized */
    uint32_t output_type;   /* --output-tensor-type; UINT32_MAX: by the rules */
    uint32_t embd_type;     /* --token-embedding-type; UINT32_MAX: by the rules */
    const char *const *overrides;   /* --tensor-type "REGEX=TYPE": the first */
    size_t n_overrides;             /* pattern found in a name (PCRE2) wins */
} rvl_qmix_params;

typedef struct {
    const char *name;       /* NUL-terminated */
    uint32_t type;          /* its type in the input */
    uint32_t n_dims;
    uint64_t ne[4];
} rvl_qmix_tensor;

/* The output type of each of n tensors (types[i] for t[i]) by llama.cpp's
 * llama_tensor_get_type: quantizable tensors (2-D+, names ending in
 * "weight", not norms, ...) get the mix's type adjusted per tensor (output
 * and tied token_embd Q6_K, some attn_v / ffn_down higher, ...), evaluated
 * in llama.cpp's tensor order (by layer, then name); rows that are not
 * whole blocks fall back (Q4_K -> Q5_0, Q6_K -> Q8_0, ... then F16), counted
 * in *n_fallback (may be NULL). Others keep their type. RVL_EINVAL for a
 * bad override, naming it. */
int rvl_qmix_plan(const rvl_qmix_params *p, const rvl_qmix_tensor *t, size_t n,
                  uint32_t *types, size_t *n_fallback);
/* Does the tensor need an importance matrix (llama.cpp's rule: IQ1/IQ2/
 * IQ3_XXS types, Q2_K in a Q2_K_S file; never token_embd or output)? */
bool rvl_qmix_needs_imatrix(const rvl_qmix *mix, const char *name, uint32_t type);

typedef struct {
    const char *mix;                    /* TYPE: a mix name (rvl_qmix_find) */
    int n_threads;                      /* <= 0: one per CPU */
    bool pure, leave_output, allow_requantize, dry_run, stats;
    uint32_t output_type, embd_type;    /* UINT32_MAX: by the rules */
    const char *const *overrides;       /* "REGEX=TYPE" */
    size_t n_overrides;
    const char *imatrix;                /* llama.cpp imatrix GGUF, or NULL */
    rvl_convert_progress_fn progress;   /* may be NULL */
    void *ud;
} rvl_quantize_params;

typedef struct {
    char name[64];
    uint32_t type_in, type_out;
    uint64_t n_elements, bytes_in, bytes_out;
    bool fallback;                      /* the rows forced another type */
    bool imatrix;                       /* importance weights were used */
    double rmse;                        /* with stats: RMS of (quantized - input), else 0 */
    double rms;                         /* with stats: RMS of the input */
} rvl_quantize_tensor_stat;

typedef struct {
    uint64_t n_tensors;
    rvl_quantize_tensor_stat *tensors;  /* owned: free with rvl_quantize_report_free;
                                           in output order */
    uint64_t n_elements, bytes_in, bytes_out;   /* tensor data only */
    uint64_t n_fallback, n_no_imatrix;  /* with an imatrix: tensors it had no entry for */
    uint64_t file_bytes;                /* size of OUT (0 with dry_run) */
    double seconds;
} rvl_quantize_report;
void rvl_quantize_report_free(rvl_quantize_report *r);

/* GGUF (F32/F16/BF16 weights; quantized ones with allow_requantize) or a
 * Hugging Face directory (config.json, *.safetensors, tokenizer.json,
 * tokenizer_config.json; llama/Mistral/qwen2 with a byte-level BPE or a
 * SentencePiece-style BPE (byte_fallback) vocabulary: imported as
 * convert_hf_to_gguf.py would, into a temporary
 * file next to OUT) -> GGUF with the mix's types, metadata copied with
 * general.file_type and general.quantization_version (2) set. Tensors in
 * llama-quantize's order. `report` (may be NULL) is filled on success,
 * also for dry_run (no output written). */
int rvl_quantize_gguf(const char *in, const char *out, const rvl_quantize_params *p,
                      rvl_quantize_report *report);

/* ======================================================================
 * LoRA merge (lib/convert/lora_merge.c): adapters (rvl_lora_*, ruvllm.h)
 * merged into a GGUF's weights offline: `ruvllm lora-merge`.
 * ====================================================================== */
typedef struct {
    const char *type;       /* NULL: every tensor keeps its own type (merged
                               ones requantized to it); else a mix name as
                               rvl_quantize_gguf takes, applied to all tensors */
    int n_threads;          /* <= 0: one per CPU */
    rvl_convert_progress_fn progress;   /* may be NULL */
    void *ud;
} rvl_lora_merge_params;

typedef struct {
    rvl_quantize_report q;  /* per-tensor types and sizes, as quantize's */
    size_t n_adapters;
    rvl_lora_info *adapters;/* owned: freed by rvl_lora_merge_report_free
                               (paths borrowed from the caller's specs) */
    uint64_t n_merged;      /* tensors that received an update */
} rvl_lora_merge_report;
void rvl_lora_merge_report_free(rvl_lora_merge_report *r);

/* Merge n adapters ("FILE[:SCALE]" specs) into the GGUF base and write
 * out atomically: every targeted tensor dequantized to f32, the updates of
 * all adapters added, requantized to its type (or p->type's); the other
 * tensors copied (or converted to p->type's); metadata copied (general.
 * file_type updated for p->type). report may be NULL. */
int rvl_lora_merge(const char *base, const char *const *specs, size_t n, const char *out,
                   const rvl_lora_merge_params *p, rvl_lora_merge_report *report);

/* ======================================================================
 * Session-file inspection (lib/tools/kv_inspect.c): what `ruvllm kv-inspect`
 * shows. A reader of the session layout (docs/formats.md, versions 1 and
 * 2) that needs no model or context and does not stop at the first
 * problem: it walks every block the file holds, verifies each block's
 * xxh3-64, the header's and the whole file's, and records what is wrong
 * (with the byte offset) instead of failing, so a damaged file is still
 * inspected as far as possible. Every size is checked against the file
 * and the header before use; a block decompresses to at most 64 MiB.
 *
 *   rvl_kv_inspect_open(&f, path);        header + block walk + checksums
 *   rvl_kv_inspect_info(f), rvl_kv_inspect_block(f, i), rvl_kv_inspect_problem(f, i)
 *   rvl_kv_inspect_page(f, i, k, v, &n);  a page's keys and values as floats
 *   rvl_kv_inspect_stats(f, &p, &heads, &n);   per-head statistics
 *   rvl_kv_inspect_diff(a, b, &d);        where two sessions diverge
 * ====================================================================== */
typedef struct rvl_kv_inspect rvl_kv_inspect;

/* Page storage formats: kernels/kvq.h's numbering (0 f16, 1 q8, 2 q4,
 * 3 tq4, 4 tq3) and 5 f32, as session files store them. */
enum { RVL_KVI_F16 = 0, RVL_KVI_Q8, RVL_KVI_Q4, RVL_KVI_TQ4, RVL_KVI_TQ3, RVL_KVI_F32,
       RVL_KVI_NFMT };
/* "f16", "q8", "q4", "tq4", "tq3", "f32"; "?" out of range. */
const char *rvl_kv_inspect_fmt_name(int fmt);

enum { RVL_KVI_BLK_TOKENS = 1, RVL_KVI_BLK_EXTRA = 2, RVL_KVI_BLK_KV = 3, RVL_KVI_BLK_CENTER = 4,
       RVL_KVI_BLK_MODEL = 5 };

typedef enum {
    RVL_KVI_OK = 0,
    RVL_KVI_BAD_CHECKSUM,  /* the stored bytes do not match their xxh3-64 */
    RVL_KVI_TRUNCATED,     /* the block runs past the end of the file */
    RVL_KVI_BAD_DATA,      /* checksum fine, but the zstd frame does not give
                              the raw size, or the size/formats are not what
                              the header implies */
    RVL_KVI_MISPLACED,     /* kind/layer/page is not what the layout puts here */
} rvl_kv_inspect_status;

typedef struct {
    uint64_t offset;           /* of the block's header */
    uint32_t kind;             /* RVL_KVI_BLK_* (as read, may be anything) */
    uint32_t layer, page;      /* kv blocks */
    int k_fmt, v_fmt;          /* kv blocks: RVL_KVI_* */
    uint32_t tier;             /* kv blocks: 0 hot, 1 warm, 2 cold (v1: 0) */
    uint32_t n_pos;            /* kv blocks: positions used (1..32) */
    uint32_t raw_bytes, stored_bytes;
    uint64_t k_bytes, v_bytes; /* kv blocks: raw bytes of the keys, values */
    uint64_t f16_bytes;        /* kv blocks: the same pages' bytes in f16 */
    uint64_t hash_stored, hash_computed;
    rvl_kv_inspect_status status;
} rvl_kv_inspect_blockinfo;

typedef struct {
    const char *path;          /* borrowed: valid until rvl_kv_inspect_close */
    uint64_t file_size;
    uint32_t version;          /* 1, 2 or 3 */
    uint32_t header_bytes;     /* 56 (v1), 88 (v2, v3) */
    uint32_t block_header_bytes; /* 28 (v1), 32 (v2, v3) */
    uint64_t fingerprint;      /* the model's (xxh3-64) */
    uint32_t n_layer, n_head_kv, head_dim; /* head geometry: 0 when unknown (v1) */
    uint32_t kv_dim;           /* n_head_kv * head_dim */
    uint32_t page_size;        /* positions per page (32) */
    uint32_t n_tokens;
    int k_fmt[3], v_fmt[3];    /* per tier (v1: the element type in all three) */
    uint32_t hot, warm;        /* tier sizes in tokens (UINT32_MAX: unbounded) */
    bool geometry_ok;          /* the header's geometry is usable (pages decode) */
    bool header_ok;            /* header checksum matches */
    uint64_t header_hash_stored, header_hash_computed;
    bool file_ok;              /* whole-file checksum matches */
    uint64_t file_hash_stored, file_hash_computed;
    bool key_centre;           /* v3 flag: keys stored centred, a center block follows extra */
    const float *centre;       /* (n_layer, kv_dim) the centre, added back to every key
                                  rvl_kv_inspect_page returns; NULL when none or damaged */
    uint64_t n_blocks_expected;  /* 2 (+1 centred, +1 model) + n_layer * ceil(n_tokens / 32) */
    const int32_t *tokens;     /* NULL when the tokens block is damaged */
    const char *extra;         /* the JSON blob, NUL-terminated; NULL if damaged */
    size_t extra_len;
    bool has_model;            /* flag bit 2: a model block (first) names the model */
    const char *model_name;    /* its store name and path; NULL when none, damaged or */
    const char *model_path;    /* not given */
} rvl_kv_inspect_info;

/* Returns an error only when the file cannot be read, is not a session
 * file (magic), is of another byte order or version, or is too short for
 * its header; any other damage is recorded as problems. owned: close with
 * rvl_kv_inspect_close (accepts NULL). _mem: from a caller buffer (borrowed: it
 * must outlive the handle); path names it in messages. */
int rvl_kv_inspect_open(rvl_kv_inspect **out, const char *path);
int rvl_kv_inspect_open_mem(rvl_kv_inspect **out, const char *path, const void *buf, size_t size);
void rvl_kv_inspect_close(rvl_kv_inspect *f);

const rvl_kv_inspect_info *rvl_kv_inspect_info_get(const rvl_kv_inspect *f);   /* borrowed */
size_t rvl_kv_inspect_n_blocks(const rvl_kv_inspect *f);
const rvl_kv_inspect_blockinfo *rvl_kv_inspect_block(const rvl_kv_inspect *f, size_t i);  /* borrowed */
/* Everything wrong with the file, in file order: "the kv block at offset
 * 5120 (layer 3, page 0): checksum mismatch (...)". borrowed. */
size_t rvl_kv_inspect_n_problems(const rvl_kv_inspect *f);
const char *rvl_kv_inspect_problem(const rvl_kv_inspect *f, size_t i);
/* true when nothing is wrong (every checksum matches, nothing missing). */
bool rvl_kv_inspect_intact(const rvl_kv_inspect *f);

/* The index of the kv block of (layer, page), or -1 when it is missing. */
long rvl_kv_inspect_find_page(const rvl_kv_inspect *f, uint32_t layer, uint32_t page);
/* Kv block i's keys and values as floats (the reconstruction for
 * quantized pages): k and v receive *n_pos rows of kv_dim floats (head h
 * at columns h * head_dim ..), each buffer holding page_size * kv_dim.
 * RVL_EFORMAT when the block is damaged or the geometry is unusable. */
int rvl_kv_inspect_page(rvl_kv_inspect *f, size_t i, float *k, float *v, uint32_t *n_pos);

typedef struct {
    double outlier_factor;     /* a channel is an outlier when its absmax
                                  exceeds this times the median channel
                                  absmax of its head (0: 4) */
    uint32_t n_head_kv, head_dim; /* for files that do not record them (v1);
                                     0: the file's */
} rvl_kv_inspect_stats_params;

/* Statistics of one layer's keys (kind 0) or values (kind 1) of one kv
 * head over every intact page. Kurtosis is Pearson's (3 for a Gaussian)
 * of all the head's coordinates pooled; "rotated" is the same after the
 * Walsh-Hadamard rotation of each vector (kernels/kvq.h's rvl_kvq_rotate;
 * for tq pages these are the stored codes times their scale). rel_mse[f]
 * is sum |x - x^|^2 / sum |x|^2 when the f16/f32 pages are encoded in
 * format f and decoded: NaN when no page is f16/f32 (not computable
 * without the original) or the format does not apply (tq needs a
 * power-of-two head_dim). */
typedef struct {
    uint32_t layer, head, kind;
    uint64_t n_pos;            /* positions seen */
    uint64_t n_pos_fmt[RVL_KVI_NFMT]; /* ... by the page format they came from */
    uint64_t n_pos_exact;      /* from f16/f32 pages: what rel_mse is over */
    float absmax;
    uint32_t absmax_channel;
    float median_channel_absmax;
    uint32_t n_outliers;
    uint32_t *outliers;        /* channel indices, ascending (owned by the array) */
    double kurtosis, kurtosis_rotated; /* NaN when not computable */
    double rel_mse[RVL_KVI_NFMT];
} rvl_kv_inspect_head;

/* *heads: n_layer * n_head_kv * 2 entries, layer-major, then head, then
 * kind. owned: free with rvl_kv_inspect_stats_free. RVL_EINVAL when the head
 * geometry is unknown (a version 1 file without params). */
int rvl_kv_inspect_stats(rvl_kv_inspect *f, const rvl_kv_inspect_stats_params *p, rvl_kv_inspect_head **heads, size_t *n);
void rvl_kv_inspect_stats_free(rvl_kv_inspect_head *heads, size_t n);

/* Where two sessions diverge. common = the length of the common prefix of
 * their token ids; first_diff = common when the files differ there (one
 * is longer or a token differs), else -1 (same tokens). For the common
 * prefix, the largest |a - b| of the keys and values per layer (NaN when
 * a page is missing or damaged in either file; the arrays are NULL when
 * the geometries differ). */
typedef struct {
    uint32_t n_tokens_a, n_tokens_b;
    uint32_t common;
    int64_t first_diff;
    bool same_model;           /* fingerprints equal */
    bool same_geometry;        /* n_layer and kv_dim equal */
    uint32_t n_layer;
    float *k_maxdiff, *v_maxdiff;   /* owned: [n_layer] */
} rvl_kv_inspect_diffres;
int rvl_kv_inspect_diff(rvl_kv_inspect *a, rvl_kv_inspect *b, rvl_kv_inspect_diffres *d);
void rvl_kv_inspect_diff_free(rvl_kv_inspect_diffres *d);

/* ======================================================================
 * Bench (lib/tools/bench.c, lib/tools/ppl.c): the measuring behind `ruvllm
 * bench`. Timing loops, memory bandwidth, peak FLOP/s, kernel calls,
 * synthetic models and perplexity live here; cmd/bench.c chooses and
 * prints.
 * ====================================================================== */
double rvl_bench_now(void);                  /* seconds, monotonic clock */

typedef struct {
    int n;
    double mean, sd;                         /* sd: sample standard deviation */
    double median, min, max;
} rvl_bench_stat;
void rvl_bench_stats(const double *x, int n, rvl_bench_stat *s);

/* Size of the largest CPU cache (sysfs); 0 when unknown. */
uint64_t rvl_bench_llc_bytes(void);

/* A kernel bench: a thread pool and a working set of ws_bytes (0: twice
 * the LLC, within [256 MiB, 1 GiB]) through which weight matrices cycle,
 * so that GEMV reads them from memory, not from the cache.
 * owned: close with rvl_bench_close. */
typedef struct rvl_bench rvl_bench;
int rvl_bench_open(rvl_bench **out, int n_threads, uint64_t ws_bytes);
void rvl_bench_close(rvl_bench *b);
/* Ask for 2 MiB pages for the bandwidth arrays and the ring of weights
 * (before rvl_bench_mem and the kernels); rvl_bench_huge_bytes() says
 * how much anonymous memory the kernel gave them (Linux; 0 elsewhere). */
void rvl_bench_set_huge_pages(rvl_bench *b, bool on);
uint64_t rvl_bench_huge_bytes(void);
int rvl_bench_n_threads(const rvl_bench *b);
uint64_t rvl_bench_ws_bytes(const rvl_bench *b);

/* STREAM-style bandwidth on the pool's threads over three arrays of
 * ws_bytes/2: best of `reps` after a warm-up, in GB/s (1e9 bytes). */
typedef struct {
    uint64_t array_bytes;
    double copy_gbs;                         /* c[i] = a[i]: 16 bytes/element */
    double triad_gbs;                        /* a[i] = b[i] + s*c[i]: 24 bytes */
    double read_gbs;                         /* sum of a[i]: 8 bytes */
    uint64_t huge_bytes;                     /* of the arrays, in 2 MiB pages */
} rvl_bench_membw;
int rvl_bench_mem(rvl_bench *b, int reps, rvl_bench_membw *out);
/* Peak f32 GFLOP/s of independent FMA chains held in registers, on all
 * the pool's threads, for an ISA ("ref": what the compiler makes of
 * scalar C; NULL: the selected one). */
int rvl_bench_peak(rvl_bench *b, const char *isa, double *gflops);
/* Peak int8 GOP/s (2 per multiply-add) of independent vpdpbusd chains in
 * registers, on all the pool's threads: the bound of the integer GEMM
 * tiles. *gops = 0 where the ISA has no int8 dot instruction here (only
 * AVX-512 VNNI is measured). */
int rvl_bench_peak_int8(rvl_bench *b, const char *isa, double *gops);

typedef enum {
    RVL_BENCH_GEMV, RVL_BENCH_GEMM, RVL_BENCH_QUANTIZE, RVL_BENCH_DEQUANTIZE,
    RVL_BENCH_RMSNORM, RVL_BENCH_ROPE, RVL_BENCH_SOFTMAX,
} rvl_bench_op;
const char *rvl_bench_op_name(rvl_bench_op op);   /* "gemv", ... */

typedef struct {
    rvl_bench_op op;
    uint32_t type;          /* weight format (rvl_type); ignored by rmsnorm/rope/softmax */
    const char *isa;        /* kernel variant; NULL: the selected one */
    uint64_t n, k;          /* n rows of k elements (GEMV/GEMM: outputs x inner dim;
                               rope: tokens x (heads * 128)) */
    uint32_t m;             /* GEMM: activation rows (tokens) reusing each weight row */
    int reps;               /* timed repetitions after one warm-up (1..255) */
} rvl_bench_kcase;

typedef struct {
    double median_s, min_s, max_s;           /* per operation */
    double bytes;                            /* bytes read + written per operation */
    double flops;                            /* 2*m*n*k for GEMV/GEMM; 0 for (de)quantize */
    const char *impl;                        /* variant that ran ("avx512", "ref") */
    /* GEMV, dequantize: the read bandwidth measured in the same window,
     * one read-only pass over the next cold bytes of the ring (as many as
     * the repetition's weights) paired with each kernel repetition (after
     * it in even repetitions, before it in odd ones), on the same threads
     * in the same chunks; GB/s, median, min and max over the repetitions.
     * 0 for the other operations (their roofline is the peak or
     * rvl_bench_mem's). */
    double read_gbs, read_min_gbs, read_max_gbs;
    /* GEMV/GEMM: the weights in the kernels' 16-row packed layout, as the
     * forward pass holds them for this format and variant (Q4_0, IQ4_NL,
     * Q5_0, Q8_0, Q4_K, Q6_K with AVX-512 VNNI; RUVLLM_REPACK=0 turns it
     * off in both) */
    bool packed;
} rvl_bench_kresult;
/* GEMV: y = W x with vec_dot over each row (x quantized to the format's
 * activation type beforehand, not timed). GEMM: the same for m rows of x,
 * each weight row reused m times. Weights come from the working set's
 * ring, filled with rows quantized by the format's own quantizer. GEMV
 * and dequantize alternate each timed repetition with a read-bandwidth
 * one (read_gbs above), so that a machine whose bandwidth drifts (other
 * tenants, other jobs) is compared with itself at the same moment. */
int rvl_bench_kernel(rvl_bench *b, const rvl_bench_kcase *c, rvl_bench_kresult *r);

/* Model speed: decode n random token ids in [0, n_vocab) from an empty
 * cache, `batch` per call (n: one prompt batch, 1: generation), and
 * return the wall time. The cache is emptied again afterwards. */
int rvl_bench_decode(rvl_ctx *c, uint32_t n_vocab, uint32_t n, uint32_t batch, uint64_t seed,
                     double *seconds);
/* The same at a context depth: the cache first holds `depth` positions of
 * random keys and values (rvl_ctx_fill_random; kept from the previous
 * call when it holds at least as many), then n tokens are timed. The
 * cache keeps the depth afterwards (depth 0: emptied). */
int rvl_bench_decode_at(rvl_ctx *c, uint32_t n_vocab, uint32_t depth, uint32_t n, uint32_t batch,
                        uint64_t seed, double *seconds);

/* The name of a model file's type, as llama-quantize names it
 * ("Q4_K_M"): general.file_type, then ruvllm.file_type (the project's
 * mixes), else the type of most 2-D tensors' elements. Writes it into buf
 * (cap bytes) and returns buf. */
const char *rvl_bench_file_type(const rvl_file *f, char *buf, size_t cap);

/* Synthetic llama models of random weights, for speed measurements. */
typedef struct {
    const char *name;                        /* "llama-7b", "smollm2-135m", ... */
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx_train;
    float rope_base;
    bool tied_output;                        /* no output.weight: token_embd is reused */
} rvl_bench_shape;
const rvl_bench_shape *rvl_bench_shape_at(size_t i);          /* NULL past the end */
const rvl_bench_shape *rvl_bench_shape_find(const char *name); /* NULL if unknown */
uint64_t rvl_bench_synth_size(const rvl_bench_shape *s, uint32_t type);  /* tensor bytes */
typedef void (*rvl_bench_progress_fn)(void *ud, uint64_t done, uint64_t total);
/* Write a GGUF: every matrix in `type` (or llama.cpp's fallback format
 * where rows are not whole blocks of it), norms of ones, a placeholder
 * gpt2 vocabulary. Atomic; progress (may be NULL) gets bytes written. */
int rvl_bench_synth_write(const char *path, const rvl_bench_shape *s, uint32_t type,
                          rvl_bench_progress_fn progress, void *ud);
/* The same into a private directory under `dir` (NULL: /tmp), opened with
 * rvl_model_open and unlinked at once (the mapping keeps the data).
 * Checks the free space first. owned: close with rvl_model_close. */
int rvl_bench_synth_open(rvl_model **out, const rvl_bench_shape *s, uint32_t type, const char *dir,
                         rvl_bench_progress_fn progress, void *ud);

/* Perplexity as llama-perplexity computes it: consecutive windows of
 * n_ctx tokens, the first replaced by BOS when the model adds one, each
 * scored on its second half (positions n_ctx/2 .. n_ctx-1). With
 * save_path the log-probabilities of every scored position are written
 * (atomically, by rvl_ppl_finish) for a later base_path run, which
 * reports the KL divergence and top-token agreement against them; the
 * file layout is in lib/tools/ppl.c and ruvllm-bench(1). */
typedef struct {
    uint32_t n_ctx;          /* window (0: 512, or the base file's) */
    uint32_t n_threads;      /* 0: one per CPU */
    uint32_t n_windows;      /* at most this many (0: all) */
    const char *save_path;   /* --kl-base FILE, or NULL */
    const char *base_path;   /* --kl FILE, or NULL: its windows and tokens are used */
    rvl_kv_type kv_type;     /* the context's KV cache */
    const rvl_ctx_params *kv; /* non-NULL: its kv_* fields instead of kv_type */
} rvl_ppl_params;

typedef struct {
    uint32_t n_windows;      /* scored so far */
    uint64_t count;          /* scored tokens */
    double ppl, ppl_err;     /* exp(mean NLL) and its standard error */
    bool has_base;
    double base_ppl, base_ppl_err;
    double kl_mean, kl_err, kl_max;          /* KL(base || this model), nats */
    double same_top, same_top_err;           /* fraction of equal argmax */
} rvl_ppl_stats;

typedef struct rvl_ppl rvl_ppl;
/* tokens: the text's tokens (BOS included when the model adds one); may
 * be NULL with base_path, and must match the base file's otherwise.
 * owned: close with rvl_ppl_close. */
int rvl_ppl_open(rvl_ppl **out, const rvl_model *m, const rvl_ppl_params *p,
                 const int32_t *tokens, size_t n_tokens);
uint32_t rvl_ppl_n_windows(const rvl_ppl *p);
uint32_t rvl_ppl_n_ctx(const rvl_ppl *p);
bool rvl_ppl_batched(const rvl_ppl *p);  /* one decode per window (all_logits) */
int rvl_ppl_window(rvl_ppl *p);          /* score the next window */
void rvl_ppl_get_stats(const rvl_ppl *p, rvl_ppl_stats *s);
int rvl_ppl_finish(rvl_ppl *p);          /* commit the save file (all windows done) */
void rvl_ppl_close(rvl_ppl *p);          /* discards an uncommitted save file */

/* ======================================================================
 * Pulling a model from the Hugging Face Hub (lib/tools/pull.c): what
 * `ruvllm pull OWNER/REPO[:QUANT]` does, over HTTPS with libcurl.
 *
 *   1. GET {endpoint}/api/models/{repo}/tree/main?recursive=true (pages
 *      followed by their Link header): the repository's files, with each
 *      LFS file's sha256 (lfs.oid) and size.
 *   2. The GGUF file QUANT names (case-insensitively, as a word of the file
 *      name: "Q4_K" is not "Q4_K_M"; or a file name ending in .gguf);
 *      without QUANT, Q4_K_M, else the first GGUF file, as llama.cpp's -hf
 *      chooses. mmproj files are never chosen; split files are refused;
 *      several files for one QUANT are refused, listing them.
 *   3. GET {endpoint}/{repo}/resolve/main/{path}, redirects followed, into
 *      <store>/hf.co/{repo}/{path}.part: a .part already there is continued
 *      with a Range request (a server that answers the whole file instead
 *      restarts it from 0); Ctrl-C or a lost connection leaves the .part.
 *   4. The size and sha256 checked against the hub's (a mismatch deletes
 *      the .part: RVL_EFORMAT), fsync, the manifest written
 *      (rvl_store_write_manifest), the .part renamed into place.
 * ====================================================================== */
typedef struct {
    char name[512];         /* the store name: "hf.co/OWNER/REPO:QUANT" */
    char repo[256];         /* OWNER/REPO */
    char file[1024];        /* the file's path in the repository */
    char path[4096];        /* the file's path in the store */
    char url[4096];         /* where it was downloaded from */
    char sha256[65];        /* hex; the hub's, or computed when the hub gives none */
    uint64_t size;          /* bytes */
    uint64_t resumed_from;  /* bytes of a .part that were continued (0: none) */
    bool restarted;         /* the server ignored the Range request: fetched from 0 */
    bool already;           /* already in the store with this sha256: nothing fetched */
    bool unverified;        /* the hub gave no sha256 (not an LFS file): size checked only */
} rvl_pull_result;

typedef struct {
    const char *endpoint;   /* NULL: $RUVLLM_HF_ENDPOINT, $HF_ENDPOINT, https://huggingface.co */
    const char *token;      /* NULL: $HF_TOKEN (sent as "Authorization: Bearer") */
    const char *ca_bundle;  /* NULL: $RUVLLM_CA_BUNDLE, $CURL_CA_BUNDLE, $SSL_CERT_FILE, else
                             * libcurl's own */
    /* Called once the file is chosen (r filled but for resumed_from and
     * restarted), and as it arrives (done counts a continued .part too;
     * total 0 when unknown). Either may be NULL. */
    void (*start)(void *user, const rvl_pull_result *r);
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *user;
} rvl_pull_params;

/* Split "OWNER/REPO[:QUANT]" (also with a leading "hf.co/",
 * "huggingface.co/" or "https://huggingface.co/") into repo and quant
 * ("" when none). RVL_EINVAL naming what is wrong with it. */
int rvl_pull_parse(const char *spec, char *repo, size_t repo_cap, char *quant, size_t quant_cap);
/* Pull spec into the store (p may be NULL). RVL_ENOTFOUND: no such
 * repository or no GGUF file for QUANT; RVL_EIO: network or HTTP failure
 * (the message names the URL and the status); RVL_EFORMAT: size or sha256
 * mismatch; RVL_EINTR: interrupted (the .part kept for the next pull). */
int rvl_pull(const char *spec, const rvl_pull_params *p, rvl_pull_result *r);

#ifdef __cplusplus
}
#endif
#endif /* RUVLLM_TOOLS_H */
