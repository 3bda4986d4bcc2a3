/*
 * formats.h - weight and activation block formats, and the type-traits
 * table that describes each one once.
 *
 * Every ggml format here is bit-compatible with llama.cpp's block layout
 * (ggml-common.h): same fields, same order, same bytes, little-endian. The
 * ruvllm project formats (ids from 1024) are documented in docs/formats.md
 * and at their struct below.
 *
 * Blocks are declared packed (alignment 1): a row may start at any address
 * (safetensors and GGUF data at odd offsets, tests with odd pointers), so
 * the kernels never assume more than byte alignment for block data. Float
 * arrays (kernel inputs/outputs) need their natural 4-byte alignment.
 *
 * Kernel contracts (all rows; n = elements, a multiple of block_size):
 *   quantize(x, y, n, qw)   x: n floats -> y: one row of this format.
 *                           qw: n importance weights (llama.cpp's imatrix
 *                           values for this row), or NULL. Formats without
 *                           an importance-aware search ignore qw.
 *   dequantize(x, y, n)     one row -> n floats.
 *   vec_dot(n, w, a)        dot product of a row of this format with a row
 *                           of its vec_dot_type (the activation format) of
 *                           the same length n, as a float.
 * Kernels never allocate, never do I/O and never log; they do not check
 * their arguments (lib/ validates shapes before calling them).
 */
#ifndef RVL_FORMATS_H
#define RVL_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "f16.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ruvllm kernels assume a little-endian host (GGUF data is little-endian)"
#endif

#define RVL_PACKED __attribute__((packed))

/* Type ids: the same numbers as lib/ruvllm.h's rvl_type (ggml's ids for
 * 0..41, project formats from 1024). Repeated here so kernels/ does not
 * depend on lib/; a test checks the two agree. */
enum {
    RVL_K_F32 = 0, RVL_K_F16 = 1, RVL_K_Q4_0 = 2, RVL_K_Q4_1 = 3,
    RVL_K_Q5_0 = 6, RVL_K_Q5_1 = 7, RVL_K_Q8_0 = 8, RVL_K_Q8_1 = 9,
    RVL_K_Q2_K = 10, RVL_K_Q3_K = 11, RVL_K_Q4_K = 12, RVL_K_Q5_K = 13,
    RVL_K_Q6_K = 14, RVL_K_Q8_K = 15, RVL_K_IQ2_XXS = 16, RVL_K_IQ2_XS = 17,
    RVL_K_IQ3_XXS = 18, RVL_K_IQ1_S = 19, RVL_K_IQ4_NL = 20, RVL_K_IQ3_S = 21,
    RVL_K_IQ2_S = 22, RVL_K_IQ4_XS = 23, RVL_K_I8 = 24, RVL_K_I16 = 25,
    RVL_K_I32 = 26, RVL_K_I64 = 27, RVL_K_F64 = 28, RVL_K_IQ1_M = 29,
    RVL_K_BF16 = 30, RVL_K_TQ1_0 = 34, RVL_K_TQ2_0 = 35, RVL_K_MXFP4 = 39,
    RVL_K_NVFP4 = 40, RVL_K_Q1_0 = 41,
    RVL_K_GGML_COUNT = 42,
    RVL_K_U8 = 1000, RVL_K_BOOL = 1001,
    RVL_K_RVL_I4S_G32 = 1024, RVL_K_RVL_I4S_G64 = 1025, RVL_K_RVL_I4S_G128 = 1026,
    RVL_K_RVL_I4A_G32 = 1027, RVL_K_RVL_I4A_G64 = 1028, RVL_K_RVL_I4A_G128 = 1029,
    RVL_K_RVL_I8_ROW = 1030, RVL_K_RVL_I8_G64 = 1031, RVL_K_RVL_I8_G128 = 1032,
    RVL_K_MLX_A4_G64 = 1033, RVL_K_MLX_A8_G64 = 1034,
    RVL_K_RVL_FIRST = 1024, RVL_K_RVL_END = 1035,
};

/* ======================================================================
 * ggml block layouts (llama.cpp ggml-common.h). QK_K = 256.
 * ====================================================================== */
#define RVL_QK4_0 32
#define RVL_QK8_0 32
#define RVL_QK_K 256
#define RVL_K_SCALE_SIZE 12

typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[16]; } block_q4_0;          /* x = d*(q-8) */
typedef struct RVL_PACKED { rvl_f16 d, m; uint8_t qs[16]; } block_q4_1;       /* x = d*q + m */
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
typedef struct RVL_PACKED { rvl_f16 d, m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1;
typedef struct RVL_PACKED { rvl_f16 d; int8_t qs[32]; } block_q8_0;           /* x = d*q */
typedef struct RVL_PACKED { rvl_f16 d, s; int8_t qs[32]; } block_q8_1;        /* s = d*sum(q) */
/* Q4_0..Q5_1 nibbles: byte j holds element j (low) and element j+16 (high);
 * Q5 high bits: bit j of the little-endian u32 qh is element j's bit 4. */

typedef struct RVL_PACKED {      /* 2.625 bpw: 16 groups of 16 */
    uint8_t scales[16];          /* low nibble scale, high nibble min (4 bits each) */
    uint8_t qs[64];              /* 2-bit quants, see dequantize_q2_K_ref */
    rvl_f16 d, dmin;
} block_q2_K;
typedef struct RVL_PACKED {      /* 3.4375 bpw: 16 groups of 16 */
    uint8_t hmask[32];           /* bit 3 of each quant (set = no -4 offset) */
    uint8_t qs[64];              /* low 2 bits */
    uint8_t scales[12];          /* 16 6-bit scales, see rvl_q3_K_scales */
    rvl_f16 d;
} block_q3_K;
typedef struct RVL_PACKED {      /* 4.5 bpw: 8 groups of 32 */
    rvl_f16 d, dmin;
    uint8_t scales[RVL_K_SCALE_SIZE]; /* 8 6-bit scales + 8 6-bit mins */
    uint8_t qs[128];
} block_q4_K;
typedef struct RVL_PACKED {      /* 5.5 bpw */
    rvl_f16 d, dmin;
    uint8_t scales[RVL_K_SCALE_SIZE];
    uint8_t qh[32];
    uint8_t qs[128];
} block_q5_K;
typedef struct RVL_PACKED {      /* 6.5625 bpw: 16 groups of 16 */
    uint8_t ql[128];             /* low 4 bits */
    uint8_t qh[64];              /* high 2 bits */
    int8_t scales[16];           /* 8-bit scales */
    rvl_f16 d;
} block_q6_K;
typedef struct RVL_PACKED {      /* activation format of the K-quants */
    float d;
    int8_t qs[256];
    int16_t bsums[16];           /* sum of each group of 16 quants */
} block_q8_K;

typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[16]; } block_iq4_nl;        /* x = d*kvalues[q] */
typedef struct RVL_PACKED {
    rvl_f16 d;
    uint16_t scales_h;           /* bits 4-5 of the 8 6-bit scales, 2 bits each */
    uint8_t scales_l[4];         /* bits 0-3, a nibble each */
    uint8_t qs[128];
} block_iq4_xs;

/* dequantize-only ggml formats (gguf-py dequantizes them; no quantizer) */
typedef struct RVL_PACKED { rvl_f16 d; uint16_t qs[32]; } block_iq2_xxs;
typedef struct RVL_PACKED { rvl_f16 d; uint16_t qs[32]; uint8_t scales[8]; } block_iq2_xs;
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } block_iq2_s;
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[96]; } block_iq3_xxs;
typedef struct RVL_PACKED {
    rvl_f16 d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4];
} block_iq3_s;
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[32]; uint16_t qh[8]; } block_iq1_s;
typedef struct RVL_PACKED { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } block_iq1_m;
typedef struct RVL_PACKED { uint8_t qs[48]; uint8_t qh[4]; rvl_f16 d; } block_tq1_0;
typedef struct RVL_PACKED { uint8_t qs[64]; rvl_f16 d; } block_tq2_0;
/* MXFP4 (OCP microscaling, gpt-oss's experts): e an E8M0 exponent shared
 * by 32 E2M1 values, nibbles as Q4_0 (byte j: element j low, j+16 high);
 * x = 2^(e-127) * e2m1[q] = rvl_e8m0_half(e) * rvl_kvalues_mxfp4[q]. */
typedef struct RVL_PACKED { uint8_t e; uint8_t qs[16]; } block_mxfp4;
typedef struct RVL_PACKED { uint8_t d[4]; uint8_t qs[32]; } block_nvfp4;
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[16]; } block_q1_0;          /* 128 signs */

/* ======================================================================
 * ruvllm project formats (docs/formats.md).
 *
 * RVL_I4S_G{32,64,128}  INT4 group-wise symmetric: f16 d, then G/2 bytes;
 *     byte j holds element j (low nibble) and element j+G/2 (high nibble);
 *     x = d * (q - 8), q in 0..15. The quantizer uses the symmetric range
 *     q-8 in [-7, 7] (d = absmax/7). G32 is byte-for-byte Q4_0's layout.
 * RVL_I4A_G{32,64,128}  INT4 group-wise asymmetric with a zero point:
 *     f16 d, f16 z, then G/2 bytes as above; x = d * (q - z). z is a
 *     (possibly fractional) f16; integer zero points (AWQ/GPTQ, group 128)
 *     are stored exactly.
 * RVL_I8_ROW   INT8 per row: each row starts with a 4-byte f32 scale (the
 *     row header) followed by n int8 values; x = scale * q, q in -127..127.
 *     Block geometry 1 element / 1 byte plus row_header = 4: size rows
 *     with rvl_kformat_row_bytes / rvl_type_row_bytes, never bs/ts alone.
 * RVL_I8_G{64,128}  INT8 per group: f16 d, then G int8; x = d * q.
 *     (INT8 per group of 32 is exactly Q8_0: use Q8_0.)
 * MLX_A{4,8}_G64  MLX affine quantization (mlx.core.quantize, group 64):
 *     f32 scale, f32 bias, then the group's packed values exactly as MLX
 *     stores them in its uint32 words (little-endian): 4-bit, byte j holds
 *     element 2j (low nibble) and 2j+1 (high nibble); 8-bit, one byte per
 *     element. x = scale * q + bias. Scales and biases are kept in f32 so
 *     that both f16 and bf16 MLX checkpoints repack losslessly.
 * ====================================================================== */
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[16]; } block_rvl_i4s_g32;
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[32]; } block_rvl_i4s_g64;
typedef struct RVL_PACKED { rvl_f16 d; uint8_t qs[64]; } block_rvl_i4s_g128;
typedef struct RVL_PACKED { rvl_f16 d, z; uint8_t qs[16]; } block_rvl_i4a_g32;
typedef struct RVL_PACKED { rvl_f16 d, z; uint8_t qs[32]; } block_rvl_i4a_g64;
typedef struct RVL_PACKED { rvl_f16 d, z; uint8_t qs[64]; } block_rvl_i4a_g128;
typedef struct RVL_PACKED { rvl_f16 d; int8_t qs[64]; } block_rvl_i8_g64;
typedef struct RVL_PACKED { rvl_f16 d; int8_t qs[128]; } block_rvl_i8_g128;
typedef struct RVL_PACKED { float scale, bias; uint8_t qs[32]; } block_mlx_a4_g64;
typedef struct RVL_PACKED { float scale, bias; uint8_t qs[64]; } block_mlx_a8_g64;
#define RVL_I8_ROW_HEADER 4

/* IQ4_NL / IQ4_XS non-linear levels (llama.cpp kvalues_iq4nl). */
extern const int8_t rvl_kvalues_iq4nl[16];
/* The E2M1 values doubled to integers (llama.cpp kvalues_mxfp4): 0 0.5 1
 * 1.5 2 3 4 6 and their negatives, times 2. Code 8 (-0) reads as 0. */
extern const int8_t rvl_kvalues_mxfp4[16];

/* An E8M0 exponent as 2^(e-127) / 2, the scale of the doubled levels
 * (llama.cpp ggml_e8m0_to_fp32_half): e = 0 and 1 are the subnormals
 * 2^-128 and 2^-127; 255 is 2^127, not NaN (ggml ignores the NaN code). */
static inline float rvl_e8m0_half(uint8_t e)
{
    return rvl_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* ======================================================================
 * The type-traits table.
 * ====================================================================== */
typedef void (*rvl_quantize_fn)(const float *x, void *y, int64_t n, const float *qw);
typedef void (*rvl_dequantize_fn)(const void *x, float *y, int64_t n);
typedef float (*rvl_vec_dot_fn)(int64_t n, const void *w, const void *a);
/* y[t * y_stride + r] = vec_dot(n, w + r * w_stride, act + t * act_stride)
 * for r < nr and t < nt (nr up to RVL_GEMM_ROWS, nt up to 32 are the tile
 * sizes it is made for; any count works). Equal to vec_dot within the
 * bound of dispatch.h; each (r, t) result is the same whatever nr, nt and
 * the position of the row and token in the call.
 * nt = 1 is a GEMV (decode): RVL_GEMM_ROWS rows share the activation
 * loads, faster than vec_dot row by row, and gives the same bits as any
 * tile, so decode and prompt processing agree. Rows are best passed in
 * order, RVL_GEMM_ROWS at a time: each call prefetches the next group. */
typedef void (*rvl_gemm_fn)(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                            size_t act_stride, int nt, float *y, size_t y_stride);
#define RVL_GEMM_ROWS 8

/* Weights repacked at load 16 rows at a time for one kernel that does
 * both prompt processing and decode (Q4_0, IQ4_NL, Q5_0, Q8_0 with Q8_0
 * activations; Q4_K, Q6_K with Q8_K; AVX-512 VNNI). Block i of a group of
 * 16 rows is 16 * type_size bytes at i * 16 * type_size, nothing added:
 * the rows' f16 scales first (d, row r's at 2r; Q4_K: then dmin), then
 * every other field in 64-byte pieces of 4 bytes of each row, row r's at
 * 4r (kernels/ref/pack16.c has each format's order). One 64-byte load
 * holds 4 quant bytes of each of the 16 rows, one int32 lane per row, and
 * a block's integer dot product of a row stays in its lane. gemm16
 * multiplies ng consecutive groups with nt activation rows (Q8_0 rows
 * followed by rvl_act_sums' block sums and scales) and gives
 *   y[t * y_stride + 16g + r] = sum over blocks i, in order, with fused
 *       multiply-adds, of (float)isum(r, t, i) * (d_w * d_a)
 *       (Q4_K: minus (float)msum(r, t, i) * (dmin_w * d_a)),
 * isum and msum the block's exact integers as the reference computes
 * them: the same bits whatever nt (nt = 1 is decode) and however tokens
 * are grouped, and within dispatch.h's bound of vec_dot on the row-major
 * rows (the order of the float additions differs). NULL where the
 * selected ISA has no such kernel for the format: lib/ keeps rows. */
#define RVL_PACK16_ROWS 16
typedef void (*rvl_gemm16_fn)(int64_t n, const void *w, int64_t ng, const void *act,
                              size_t act_stride, int nt, float *y, size_t y_stride);
/* Convert one group between 16 row-major rows (`stride` bytes apart, no
 * alignment needed) and the layout. */
typedef void (*rvl_pack_fn)(int64_t n, const void *rows, size_t stride, void *group);
typedef void (*rvl_unpack_fn)(int64_t n, const void *group, void *rows, size_t stride);
/* A Q8_0 activation row of n elements is followed, at this offset from its
 * start, by one int32 per block, the sum of its 32 quants (gemm16's offset
 * term: Q4_0's levels are q - 8, exactly sum(q * a) - 8 * sum(a)), then
 * one float per block, its d (so that a kernel broadcasts it from memory). */
static inline size_t rvl_act_sums_offset(int64_t n)
{
    return ((size_t)n / 32 * 34 + 3) & ~(size_t)3;
}
/* Bytes of such a row with its sums and scales. */
static inline size_t rvl_act_sums_row_bytes(int64_t n)
{
    return rvl_act_sums_offset(n) + (size_t)n / 32 * 8;
}
/* Write the block sums and scales after a Q8_0 row of n elements
 * (ref/pack16.c). */
void rvl_act_sums(void *row, int64_t n);

enum {
    RVL_KF_QUANTIZED = 1 << 0,   /* block-quantized (not a plain element type) */
    RVL_KF_PROJECT = 1 << 1,     /* ruvllm-only format, marked in GGUF metadata */
    RVL_KF_ACT = 1 << 2,         /* activation format (Q8_0, Q8_1, Q8_K, ...) */
};

typedef struct {
    const char *name;            /* "Q4_K", as llama.cpp / gguf-py spell it */
    uint32_t type;               /* rvl_type id */
    uint32_t block_size;         /* elements per block (1 for plain types) */
    uint32_t type_size;          /* bytes per block */
    uint32_t row_header;         /* bytes before the first block of each row */
    uint32_t flags;              /* RVL_KF_* */
    uint32_t vec_dot_type;       /* activation format vec_dot takes */
    rvl_quantize_fn quantize;    /* NULL: no quantizer */
    rvl_dequantize_fn dequantize;/* NULL: no dequantizer */
    rvl_vec_dot_fn vec_dot;      /* NULL: not a weight format we multiply */
    rvl_gemm_fn gemm;            /* NULL: no tiled kernel, loop over vec_dot */
    rvl_gemm16_fn gemm16;        /* NULL: no 16-row layout (then pack16 and */
    rvl_pack_fn pack16;          /*  unpack16 are NULL too) */
    rvl_unpack_fn unpack16;
    rvl_quantize_fn quantize_act;/* Q8_0: quantize a row and write rvl_act_sums' tail
                                    in one pass (NULL: quantize, then rvl_act_sums) */
} rvl_kformat;

/* borrowed: static entry, or NULL for an unknown or removed type id. The
 * kernels are those of the ISA selected at start-up (dispatch.h). */
const rvl_kformat *rvl_kformat_get(uint32_t type);
/* Iterate: rvl_kformat_at(i) for i = 0.. until it returns NULL. */
const rvl_kformat *rvl_kformat_at(size_t i);

/* The reference table (scalar kernels only), which dispatch.c copies into
 * each ISA's table. Slots number the type ids densely: 0 .. SLOTS-1, in
 * rvl_kformat_at order; -1 for an id outside every range. */
#define RVL_KFORMAT_SLOTS (RVL_K_GGML_COUNT + 2 + (RVL_K_RVL_END - RVL_K_RVL_FIRST))
int rvl_kformat_slot(uint32_t type);
const rvl_kformat *rvl_kformat_ref(uint32_t type);

/* Bytes of one row of n elements (n a multiple of block_size; the caller
 * has checked for overflow). */
static inline uint64_t rvl_kformat_row_bytes(const rvl_kformat *f, uint64_t n)
{
    return f->row_header + n / f->block_size * f->type_size;
}

/* ======================================================================
 * Reference (scalar) kernels: kernels/ref/. Named <op>_<format>_ref.
 * ====================================================================== */
#define RVL_DECL_Q(fmt) \
    void quantize_##fmt##_ref(const float *x, void *y, int64_t n, const float *qw); \
    void dequantize_##fmt##_ref(const void *x, float *y, int64_t n);
#define RVL_DECL_DQ(fmt) \
    void dequantize_##fmt##_ref(const void *x, float *y, int64_t n);

RVL_DECL_Q(f32) RVL_DECL_Q(f16) RVL_DECL_Q(bf16)
RVL_DECL_Q(q4_0) RVL_DECL_Q(q4_1) RVL_DECL_Q(q5_0) RVL_DECL_Q(q5_1)
RVL_DECL_Q(q8_0) RVL_DECL_Q(q8_1) RVL_DECL_Q(q1_0)
RVL_DECL_Q(q2_K) RVL_DECL_Q(q3_K) RVL_DECL_Q(q4_K) RVL_DECL_Q(q5_K)
RVL_DECL_Q(q6_K) RVL_DECL_Q(q8_K)
RVL_DECL_Q(iq4_nl) RVL_DECL_Q(iq4_xs)
/* the 16-row layout (gemm16) of the 32-value formats: ref/pack16.c
 * (Q4_0 also for IQ4_NL and RVL_I4S_G32, whose blocks are Q4_0's shape) */
void pack16_q4_0(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q4_0(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q5_0(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q5_0(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q4_1(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q4_1(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q5_1(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q5_1(int64_t n, const void *group, void *rows, size_t stride);
void pack16_mxfp4(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_mxfp4(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q8_0(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q8_0(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q4_K(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q4_K(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q5_K(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q5_K(int64_t n, const void *group, void *rows, size_t stride);
void pack16_iq4_xs(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_iq4_xs(int64_t n, const void *group, void *rows, size_t stride);
void pack16_q6_K(int64_t n, const void *rows, size_t stride, void *group);
void unpack16_q6_K(int64_t n, const void *group, void *rows, size_t stride);
RVL_DECL_DQ(iq2_xxs) RVL_DECL_DQ(iq2_xs) RVL_DECL_DQ(iq2_s)
RVL_DECL_DQ(iq3_xxs) RVL_DECL_DQ(iq3_s) RVL_DECL_DQ(iq1_s) RVL_DECL_DQ(iq1_m)
RVL_DECL_DQ(tq1_0) RVL_DECL_DQ(tq2_0) RVL_DECL_DQ(nvfp4)
RVL_DECL_Q(mxfp4)
RVL_DECL_Q(rvl_i4s_g32) RVL_DECL_Q(rvl_i4s_g64) RVL_DECL_Q(rvl_i4s_g128)
RVL_DECL_Q(rvl_i4a_g32) RVL_DECL_Q(rvl_i4a_g64) RVL_DECL_Q(rvl_i4a_g128)
RVL_DECL_Q(rvl_i8_row) RVL_DECL_Q(rvl_i8_g64) RVL_DECL_Q(rvl_i8_g128)
RVL_DECL_Q(mlx_a4_g64) RVL_DECL_Q(mlx_a8_g64)

#undef RVL_DECL_Q
#undef RVL_DECL_DQ

/* Dot products: vec_dot_<weight>_<activation>_ref(n, w, a). */
float vec_dot_f32_f32_ref(int64_t n, const void *w, const void *a);
float vec_dot_f16_f16_ref(int64_t n, const void *w, const void *a);
float vec_dot_bf16_bf16_ref(int64_t n, const void *w, const void *a);
float vec_dot_f16_f32_ref(int64_t n, const void *w, const void *a);
float vec_dot_bf16_f32_ref(int64_t n, const void *w, const void *a);
float vec_dot_q4_0_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_q4_1_q8_1_ref(int64_t n, const void *w, const void *a);
float vec_dot_q5_0_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_q5_1_q8_1_ref(int64_t n, const void *w, const void *a);
float vec_dot_q8_0_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_iq4_nl_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_mxfp4_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_q2_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q3_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q4_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q5_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q6_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_iq4_xs_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i4s_g32_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i4s_g64_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i4s_g128_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i4a_g32_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i4a_g64_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i4a_g128_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i8_row_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i8_g64_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_rvl_i8_g128_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_mlx_a4_g64_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_mlx_a8_g64_q8_0_ref(int64_t n, const void *w, const void *a);

/* The integer dot products every SIMD variant implements (written once
 * per ISA family in kernels/<arch>/int_dots.h, compiled per target). */
#define RVL_DECL_INT_DOTS(isa)                                                     \
    float vec_dot_q4_0_q8_0_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q4_1_q8_1_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q5_0_q8_0_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q5_1_q8_1_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q8_0_q8_0_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_iq4_nl_q8_0_##isa(int64_t n, const void *w, const void *a);      \
    float vec_dot_mxfp4_q8_0_##isa(int64_t n, const void *w, const void *a);       \
    float vec_dot_q2_K_q8_K_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q3_K_q8_K_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q4_K_q8_K_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q5_K_q8_K_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_q6_K_q8_K_##isa(int64_t n, const void *w, const void *a);        \
    float vec_dot_iq4_xs_q8_K_##isa(int64_t n, const void *w, const void *a);

#endif
