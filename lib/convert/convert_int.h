/*
 * convert_int.h - internals shared by the conversion modules (lib/convert/).
 */
#ifndef RVL_CONVERT_INT_H
#define RVL_CONVERT_INT_H

#include "format/format_int.h"
#include "ruvllm_tools.h"

/* llama.cpp's llama_ftype values, stored as general.file_type. */
enum {
    RVL_FTYPE_ALL_F32 = 0,
    RVL_FTYPE_MOSTLY_F16 = 1,
    RVL_FTYPE_MOSTLY_Q4_0 = 2,
    RVL_FTYPE_MOSTLY_Q4_1 = 3,
    RVL_FTYPE_MOSTLY_Q8_0 = 7,
    RVL_FTYPE_MOSTLY_Q5_0 = 8,
    RVL_FTYPE_MOSTLY_Q5_1 = 9,
    RVL_FTYPE_MOSTLY_Q2_K = 10,
    RVL_FTYPE_MOSTLY_Q3_K_S = 11,
    RVL_FTYPE_MOSTLY_Q3_K_M = 12,
    RVL_FTYPE_MOSTLY_Q3_K_L = 13,
    RVL_FTYPE_MOSTLY_Q4_K_S = 14,
    RVL_FTYPE_MOSTLY_Q4_K_M = 15,
    RVL_FTYPE_MOSTLY_Q5_K_S = 16,
    RVL_FTYPE_MOSTLY_Q5_K_M = 17,
    RVL_FTYPE_MOSTLY_Q6_K = 18,
    RVL_FTYPE_MOSTLY_Q2_K_S = 21,
    RVL_FTYPE_MOSTLY_IQ4_NL = 25,
    RVL_FTYPE_MOSTLY_IQ4_XS = 30,
    RVL_FTYPE_MOSTLY_BF16 = 32,
    RVL_FTYPE_MOSTLY_MXFP4_MOE = 38,
    RVL_FTYPE_NONE = 0xffffffffu,   /* no general.file_type (project formats) */
};

/* Floats converted per chunk (bounds scratch memory per thread). */
#define CONVERT_CHUNK_ELEMS (1u << 20)

/* general.file_type of an all-float file of `type`. */
uint32_t rvl_convert_float_ftype(uint32_t type);
/* Rows per chunk for rows of row_elems elements (at least 1, at most n_rows). */
uint64_t rvl_convert_chunk_rows(uint64_t row_elems, uint64_t n_rows);
/* Copy f's metadata in order, general.file_type replaced by `ftype`
 * (dropped when RVL_FTYPE_NONE; appended when absent), and, when qver is
 * not 0, general.quantization_version set to it (in place or appended);
 * keys in the NULL-terminated `drop` (may be NULL) left out. */
int rvl_convert_write_kvs(rvl_gguf_writer *w, const rvl_file *f, uint32_t ftype, uint32_t qver,
                          const char *const *drop);
/* The input of a conversion as an open GGUF file: IN itself, or for a
 * Hugging Face directory (or one of its .safetensors files) an import of it
 * written next to `out` (convert_hf_in.c) and unlinked once mapped.
 * owned: close with rvl_file_close. */
int rvl_convert_open_input(const char *in, const char *out, rvl_file **f);
/* The metadata half of a Hugging Face import (config.json, tokenizer.json,
 * tokenizer_config.json) from memory; for tests/fuzz/fuzz_hf_import.c. */
int rvl_convert_hf_parse(const void *config, size_t n_config, const void *tokenizer,
                         size_t n_tokenizer, const void *tok_config, size_t n_tok_config);
/* The ggml quantization version llama-quantize writes. */
#define RVL_GGML_QNT_VERSION 2

#endif
