/*
 * format_int.h - the file formats' internals shared inside lib/ (parsed GGUF and
 * safetensors images, file mappings, Hugging Face tensor names); private.
 */
#ifndef RVL_FORMAT_INT_H
#define RVL_FORMAT_INT_H

#include "ruvllm.h"

/* A parsed GGUF image. Arrays are owned by the struct; strings and tensor
 * data are borrowed views into the caller's mapping. */
struct rvl_gguf {
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;     /* absolute offset of the data section */
    uint64_t n_kv;
    rvl_kv *kv;               /* owned */
    uint64_t n_tensors;
    rvl_tensor_info *tensors; /* owned; name/data borrowed from the map */
    void *owned;              /* owned: whatever else parse allocated */
};

/* A parsed safetensors model: one file, or shards through an index. */
typedef struct rvl_st rvl_st;
struct rvl_st {
    uint64_t n_kv;            /* __metadata__ entries, all STRING */
    rvl_kv *kv;               /* owned */
    uint64_t n_tensors;
    rvl_tensor_info *tensors; /* owned; name/data borrowed from the maps */
    uint32_t n_shards;
    void *owned;              /* owned: maps, strings, ... */
    uint64_t total_size;      /* bytes of all shard files together */
    const char *const *shard_paths; /* owned: n_shards paths, sorted (the
                                       order of rvl_tensor_info.shard);
                                       NULL after rvl_st_parse */
};

/* Parse one safetensors image already in memory (shard index `shard`). */
int rvl_st_parse(rvl_st **out, const void *base, uint64_t size,
                 const char *name, uint32_t shard);
/* Open a .safetensors file, an index json, or a directory: maps the
 * shard files itself. */
int rvl_st_open(rvl_st **out, const char *path);
void rvl_st_free(rvl_st *st);
/* safetensors dtype name ("BF16") and element size of an rvl_type; NULL
 * when the type cannot be stored in safetensors. Static string. */
const char *rvl_st_dtype_name(uint32_t type, uint32_t *elem_size);
/* Largest header the reader accepts (as the reference implementation). */
#define RVL_ST_MAX_HEADER 100000000ull

/* Read-only mapping of a whole file. */
typedef struct {
    void *base;
    uint64_t size;
} rvl_map;
int rvl_map_file(rvl_map *m, const char *path);
/* The pieces of a GGUF file's mapping to populate at load (file.c); at
 * most cap into out, returns how many. */
size_t rvl_file_prefault_ranges(const rvl_file *f, const void *const (*skip)[2], size_t n_skip,
                                size_t piece, const void *(*out)[2], size_t cap);
void rvl_map_unmap(rvl_map *m);

/* The GGUF name of Hugging Face tensor `hf` of a model of family `arch`
 * (llama, qwen2, qwen3, gemma2, gemma3, phi3, mistral3, qwen2moe, qwen3moe)
 * (format/hf.c): 1 mapped into out, 0 a tensor the import skips (rotary
 * tables; lm_head when tied), -1 unknown. *perm_heads: for llama's Q/K,
 * the head count whose rows GGUF reorders (rvl_hf_row), else 0. */
int rvl_hf_tensor_name(const char *arch, uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv,
                       bool tied, const char *hf, char *out, size_t cap, uint32_t *perm_heads);
/* The other way: the Hugging Face name of GGUF tensor `gguf` (1), or -1
 * unknown; *perm_heads as above. */
int rvl_hf_name_of(const char *arch, uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv,
                   const char *gguf, char *out, size_t cap, uint32_t *perm_heads);
/* Mixture-of-experts layers: Hugging Face's per-expert matrix `hf`
 * (model.layers.N.block_sparse_moe.experts.E.w1.weight, ...mlp.experts.E.
 * gate_proj.weight, ...) as a part of GGUF's stacked 3-D tensor: 1 with
 * its name in out and E in *expert, else 0. And back: the Hugging Face
 * name of expert `expert` of GGUF's stacked tensor `gguf` (1), else 0. */
int rvl_hf_expert_tensor(const char *arch, uint32_t n_layer, const char *hf, char *out, size_t cap,
                         uint32_t *expert);
int rvl_hf_expert_name(const char *arch, uint32_t n_layer, const char *gguf, uint32_t expert,
                       char *out, size_t cap);
/* The Hugging Face row of GGUF row g of a reordered Q/K tensor of n_rows,
 * and the GGUF row of Hugging Face row r (heads 0: r itself). */
uint64_t rvl_hf_row(uint64_t g, uint32_t heads, uint64_t n_rows);
uint64_t rvl_hf_gguf_row(uint64_t r, uint32_t heads, uint64_t n_rows);

#endif
