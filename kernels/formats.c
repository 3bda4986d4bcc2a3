/*
 * formats.c - the type-traits table: one entry per tensor type, with its
 * geometry and reference kernels. lib/format/type.c (rvl_type_get & co.) reads
 * names and geometry from here; dispatch.c copies it into one table per
 * ISA and overrides the kernels with that ISA's variants.
 */
#include "formats.h"

#define Q RVL_KF_QUANTIZED
#define P (RVL_KF_QUANTIZED | RVL_KF_PROJECT)
#define A (RVL_KF_QUANTIZED | RVL_KF_ACT)

/* Entries are placed at their type id (minus the range's base). */
#define AT(id) [RVL_K_##id - BASE]
/* A weight format: quantize, dequantize, and the dot product with `act`
 * (actlc: its lower-case kernel name). */
#define W(id, nm, bs, ts, fl, fmt, act, actlc)                                     \
    AT(id) = { nm, RVL_K_##id, bs, ts, 0, fl, RVL_K_##act, quantize_##fmt##_ref,  \
               dequantize_##fmt##_ref, vec_dot_##fmt##_##actlc##_ref, NULL, NULL, NULL, NULL, NULL }
/* An activation format: quantize and dequantize, no dot of its own. */
#define ACT(id, nm, bs, ts, fmt)                                                   \
    AT(id) = { nm, RVL_K_##id, bs, ts, 0, A, RVL_K_##id, quantize_##fmt##_ref,    \
               dequantize_##fmt##_ref, NULL, NULL, NULL, NULL, NULL, NULL }
/* Dequantize only (files from llama.cpp; no quantizer, no dot yet). */
#define D(id, nm, bs, ts, fmt)                                                     \
    AT(id) = { nm, RVL_K_##id, bs, ts, 0, Q, RVL_K_F32, NULL, dequantize_##fmt##_ref, NULL, NULL, NULL, NULL, NULL, NULL }
/* Geometry only. */
#define G(id, nm, bs, ts)                                                          \
    AT(id) = { nm, RVL_K_##id, bs, ts, 0, 0, RVL_K_F32, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

/* ggml's ids 0..41 (holes: removed types) */
#define BASE 0
static const rvl_kformat ggml_table[RVL_K_GGML_COUNT] = {
    W(F32, "F32", 1, 4, 0, f32, F32, f32),
    W(F16, "F16", 1, 2, 0, f16, F16, f16),
    W(BF16, "BF16", 1, 2, 0, bf16, BF16, bf16),
    W(Q4_0, "Q4_0", 32, 18, Q, q4_0, Q8_0, q8_0),
    W(Q4_1, "Q4_1", 32, 20, Q, q4_1, Q8_1, q8_1),
    W(Q5_0, "Q5_0", 32, 22, Q, q5_0, Q8_0, q8_0),
    W(Q5_1, "Q5_1", 32, 24, Q, q5_1, Q8_1, q8_1),
    W(Q8_0, "Q8_0", 32, 34, Q, q8_0, Q8_0, q8_0),
    ACT(Q8_1, "Q8_1", 32, 36, q8_1),
    W(Q2_K, "Q2_K", 256, 84, Q, q2_K, Q8_K, q8_K),
    W(Q3_K, "Q3_K", 256, 110, Q, q3_K, Q8_K, q8_K),
    W(Q4_K, "Q4_K", 256, 144, Q, q4_K, Q8_K, q8_K),
    W(Q5_K, "Q5_K", 256, 176, Q, q5_K, Q8_K, q8_K),
    W(Q6_K, "Q6_K", 256, 210, Q, q6_K, Q8_K, q8_K),
    ACT(Q8_K, "Q8_K", 256, 292, q8_K),
    D(IQ2_XXS, "IQ2_XXS", 256, 66, iq2_xxs),
    D(IQ2_XS, "IQ2_XS", 256, 74, iq2_xs),
    D(IQ3_XXS, "IQ3_XXS", 256, 98, iq3_xxs),
    D(IQ1_S, "IQ1_S", 256, 50, iq1_s),
    W(IQ4_NL, "IQ4_NL", 32, 18, Q, iq4_nl, Q8_0, q8_0),
    D(IQ3_S, "IQ3_S", 256, 110, iq3_s),
    D(IQ2_S, "IQ2_S", 256, 82, iq2_s),
    W(IQ4_XS, "IQ4_XS", 256, 136, Q, iq4_xs, Q8_K, q8_K),
    G(I8, "I8", 1, 1),
    G(I16, "I16", 1, 2),
    G(I32, "I32", 1, 4),
    G(I64, "I64", 1, 8),
    G(F64, "F64", 1, 8),
    D(IQ1_M, "IQ1_M", 256, 56, iq1_m),
    D(TQ1_0, "TQ1_0", 256, 54, tq1_0),
    D(TQ2_0, "TQ2_0", 256, 66, tq2_0),
    W(MXFP4, "MXFP4", 32, 17, Q, mxfp4, Q8_0, q8_0),
    D(NVFP4, "NVFP4", 64, 36, nvfp4),
    AT(Q1_0) = { "Q1_0", RVL_K_Q1_0, 128, 18, 0, Q, RVL_K_F32, quantize_q1_0_ref,
                 dequantize_q1_0_ref, NULL, NULL, NULL, NULL, NULL, NULL },
};
#undef BASE

/* safetensors-only element types, ids 1000.. */
#define BASE RVL_K_U8
static const rvl_kformat st_table[2] = {
    G(U8, "U8", 1, 1),
    G(BOOL, "BOOL", 1, 1),
};
#undef BASE

/* ruvllm project formats, ids 1024.. (docs/formats.md) */
#define BASE RVL_K_RVL_FIRST
static const rvl_kformat rvl_table[RVL_K_RVL_END - RVL_K_RVL_FIRST] = {
    W(RVL_I4S_G32, "RVL_I4S_G32", 32, 18, P, rvl_i4s_g32, Q8_0, q8_0),
    W(RVL_I4S_G64, "RVL_I4S_G64", 64, 34, P, rvl_i4s_g64, Q8_0, q8_0),
    W(RVL_I4S_G128, "RVL_I4S_G128", 128, 66, P, rvl_i4s_g128, Q8_0, q8_0),
    W(RVL_I4A_G32, "RVL_I4A_G32", 32, 20, P, rvl_i4a_g32, Q8_0, q8_0),
    W(RVL_I4A_G64, "RVL_I4A_G64", 64, 36, P, rvl_i4a_g64, Q8_0, q8_0),
    W(RVL_I4A_G128, "RVL_I4A_G128", 128, 68, P, rvl_i4a_g128, Q8_0, q8_0),
    /* 32 int8 per "block" so rows pair with Q8_0; the f32 scale is the
     * 4-byte row header */
    AT(RVL_I8_ROW) = { "RVL_I8_ROW", RVL_K_RVL_I8_ROW, 32, 32, RVL_I8_ROW_HEADER, P,
                       RVL_K_Q8_0, quantize_rvl_i8_row_ref, dequantize_rvl_i8_row_ref,
                       vec_dot_rvl_i8_row_q8_0_ref, NULL, NULL, NULL, NULL, NULL },
    W(RVL_I8_G64, "RVL_I8_G64", 64, 66, P, rvl_i8_g64, Q8_0, q8_0),
    W(RVL_I8_G128, "RVL_I8_G128", 128, 130, P, rvl_i8_g128, Q8_0, q8_0),
    W(MLX_A4_G64, "MLX_A4_G64", 64, 40, P, mlx_a4_g64, Q8_0, q8_0),
    W(MLX_A8_G64, "MLX_A8_G64", 64, 72, P, mlx_a8_g64, Q8_0, q8_0),
};
#undef BASE

/* Dense slot of a type id: ggml ids, then safetensors-only, then project
 * formats (the order of rvl_kformat_at). */
int rvl_kformat_slot(uint32_t type)
{
    if (type < RVL_K_GGML_COUNT)
        return (int)type;
    if (type >= RVL_K_U8 && type <= RVL_K_BOOL)
        return RVL_K_GGML_COUNT + (int)(type - RVL_K_U8);
    if (type >= RVL_K_RVL_FIRST && type < RVL_K_RVL_END)
        return RVL_K_GGML_COUNT + 2 + (int)(type - RVL_K_RVL_FIRST);
    return -1;
}

const rvl_kformat *rvl_kformat_ref(uint32_t type)
{
    const rvl_kformat *f = NULL;
    if (type < RVL_K_GGML_COUNT)
        f = &ggml_table[type];
    else if (type >= RVL_K_U8 && type <= RVL_K_BOOL)
        f = &st_table[type - RVL_K_U8];
    else if (type >= RVL_K_RVL_FIRST && type < RVL_K_RVL_END)
        f = &rvl_table[type - RVL_K_RVL_FIRST];
    return f && f->name ? f : NULL;
}
