/*
 * types.c - the element-type table: names and block geometry of every
 * tensor type a file may hold. Block sizes and bytes per block follow
 * ggml's layouts (bit-compatible with llama.cpp). The kernel issue extends
 * each format with its quantize/dequantize/dot kernels in kernels/.
 */
#include <strings.h>

#include "ruvllm.h"

#define T(id, nm, bs, ts, q) [id] = { nm, bs, ts, q }

static const rvl_type_info ggml_types[RVL_TYPE_GGML_COUNT] = {
    T(RVL_TYPE_F32, "F32", 1, 4, false),
    T(RVL_TYPE_F16, "F16", 1, 2, false),
    T(RVL_TYPE_Q4_0, "Q4_0", 32, 18, true),
    T(RVL_TYPE_Q4_1, "Q4_1", 32, 20, true),
    T(RVL_TYPE_Q5_0, "Q5_0", 32, 22, true),
    T(RVL_TYPE_Q5_1, "Q5_1", 32, 24, true),
    T(RVL_TYPE_Q8_0, "Q8_0", 32, 34, true),
    T(RVL_TYPE_Q8_1, "Q8_1", 32, 36, true),
    T(RVL_TYPE_Q2_K, "Q2_K", 256, 84, true),
    T(RVL_TYPE_Q3_K, "Q3_K", 256, 110, true),
    T(RVL_TYPE_Q4_K, "Q4_K", 256, 144, true),
    T(RVL_TYPE_Q5_K, "Q5_K", 256, 176, true),
    T(RVL_TYPE_Q6_K, "Q6_K", 256, 210, true),
    T(RVL_TYPE_Q8_K, "Q8_K", 256, 292, true),
    T(RVL_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, true),
    T(RVL_TYPE_IQ2_XS, "IQ2_XS", 256, 74, true),
    T(RVL_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, true),
    T(RVL_TYPE_IQ1_S, "IQ1_S", 256, 50, true),
    T(RVL_TYPE_IQ4_NL, "IQ4_NL", 32, 18, true),
    T(RVL_TYPE_IQ3_S, "IQ3_S", 256, 110, true),
    T(RVL_TYPE_IQ2_S, "IQ2_S", 256, 82, true),
    T(RVL_TYPE_IQ4_XS, "IQ4_XS", 256, 136, true),
    T(RVL_TYPE_I8, "I8", 1, 1, false),
    T(RVL_TYPE_I16, "I16", 1, 2, false),
    T(RVL_TYPE_I32, "I32", 1, 4, false),
    T(RVL_TYPE_I64, "I64", 1, 8, false),
    T(RVL_TYPE_F64, "F64", 1, 8, false),
    T(RVL_TYPE_IQ1_M, "IQ1_M", 256, 56, true),
    T(RVL_TYPE_BF16, "BF16", 1, 2, false),
    T(RVL_TYPE_TQ1_0, "TQ1_0", 256, 54, true),
    T(RVL_TYPE_TQ2_0, "TQ2_0", 256, 66, true),
    T(RVL_TYPE_MXFP4, "MXFP4", 32, 17, true),
    T(RVL_TYPE_NVFP4, "NVFP4", 64, 36, true),
    T(RVL_TYPE_Q1_0, "Q1_0", 128, 18, true),
};

static const rvl_type_info type_u8 = { "U8", 1, 1, false };
static const rvl_type_info type_bool = { "BOOL", 1, 1, false };

const rvl_type_info *rvl_type_get(uint32_t type)
{
    if (type < RVL_TYPE_GGML_COUNT)
        return ggml_types[type].name ? &ggml_types[type] : NULL;
    if (type == RVL_TYPE_U8)
        return &type_u8;
    if (type == RVL_TYPE_BOOL)
        return &type_bool;
    return NULL;
}

int rvl_type_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
    const rvl_type_info *ti = rvl_type_get(type);
    if (!ti)
        return rvl_seterr(RVL_EFORMAT, "unknown tensor type %u", type);
    if (n % ti->block_size)
        return rvl_seterr(RVL_EFORMAT,
                          "row of %llu elements is not a multiple of the %s block size %u",
                          (unsigned long long)n, ti->name, ti->block_size);
    if (rvl_mul_ovf(n / ti->block_size, ti->type_size, bytes))
        return rvl_seterr(RVL_ERANGE, "tensor size overflows");
    return 0;
}

int rvl_type_from_name(const char *name)
{
    for (int i = 0; i < RVL_TYPE_GGML_COUNT; i++)
        if (ggml_types[i].name && strcasecmp(ggml_types[i].name, name) == 0)
            return i;
    if (strcasecmp(name, "U8") == 0)
        return RVL_TYPE_U8;
    if (strcasecmp(name, "BOOL") == 0)
        return RVL_TYPE_BOOL;
    return -1;
}
