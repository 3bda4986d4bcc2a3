/*
 * x86.h - the x86 kernel variants (kernels/x86/), named <op>_<format>_<isa>
 * like the reference kernels they replace. dispatch.c maps them to the
 * table slots; tests/test_kernels_simd.c compares each one with ref.
 *
 *   _avx2         AVX2 + FMA + F16C                    (avx2.c)
 *   _avx512       AVX-512 F/BW/VL                      (avx512.c)
 *   _avx512vnni   AVX-512 VL + VNNI (vpdpbusd/vpdpwssd) on 256-bit vectors
 *   _avx512bf16   AVX-512 BF16 (vdpbf16ps)
 *
 * Each file turns its target on for its own functions only (pragma), so
 * the binary still runs on any x86-64: nothing here is called unless
 * dispatch.c has seen the CPU features.
 */
#ifndef RVL_KERNELS_X86_H
#define RVL_KERNELS_X86_H

#include "formats.h"

#if defined(__x86_64__) || defined(__i386__)
#define RVL_HAVE_X86 1


/* Integer dot products (int_dots.h, compiled once per target). */
RVL_DECL_INT_DOTS(avx2)
RVL_DECL_INT_DOTS(avx512vnni)

/* avx2.c: plain-type dots, activation quantizers, dequantizers. */
float vec_dot_f32_f32_avx2(int64_t n, const void *w, const void *a);
float vec_dot_f16_f16_avx2(int64_t n, const void *w, const void *a);
float vec_dot_bf16_bf16_avx2(int64_t n, const void *w, const void *a);
void quantize_q8_0_avx2(const float *x, void *y, int64_t n, const float *qw);
void quantize_q8_1_avx2(const float *x, void *y, int64_t n, const float *qw);
void quantize_q8_0_act_avx2(const float *x, void *y, int64_t n, const float *qw);
void quantize_q8_K_avx2(const float *x, void *y, int64_t n, const float *qw);
void quantize_f16_avx2(const float *x, void *y, int64_t n, const float *qw);
void quantize_bf16_avx2(const float *x, void *y, int64_t n, const float *qw);
void dequantize_f16_avx2(const void *x, float *y, int64_t n);
void dequantize_bf16_avx2(const void *x, float *y, int64_t n);
void dequantize_q4_0_avx2(const void *x, float *y, int64_t n);
void dequantize_q4_1_avx2(const void *x, float *y, int64_t n);
void dequantize_q8_0_avx2(const void *x, float *y, int64_t n);
void dequantize_q4_K_avx2(const void *x, float *y, int64_t n);
void dequantize_q6_K_avx2(const void *x, float *y, int64_t n);

/* avx512.c: plain-type dots on 512-bit vectors. */
float vec_dot_f32_f32_avx512(int64_t n, const void *w, const void *a);
float vec_dot_f16_f16_avx512(int64_t n, const void *w, const void *a);
float vec_dot_bf16_bf16_avx512(int64_t n, const void *w, const void *a);
float vec_dot_bf16_bf16_avx512bf16(int64_t n, const void *w, const void *a);


/* gemm_avx512.c: tiled GEMM (formats.h, rvl_gemm_fn) with VNNI. */
#define RVL_X86_GEMM(name)                                                         \
    void name(int64_t n, const void *w, size_t w_stride, int nr, const void *act,  \
              size_t act_stride, int nt, float *y, size_t y_stride);
RVL_X86_GEMM(gemm_q4_0_q8_0_avx512vnni)
RVL_X86_GEMM(gemm_q4_1_q8_1_avx512vnni)
RVL_X86_GEMM(gemm_q8_0_q8_0_avx512vnni)
RVL_X86_GEMM(gemm_q4_K_q8_K_avx512vnni)
RVL_X86_GEMM(gemm_q6_K_q8_K_avx512vnni)
RVL_X86_GEMM(gemm_q5_0_q8_0_avx512vnni)
RVL_X86_GEMM(gemm_q5_1_q8_1_avx512vnni)
RVL_X86_GEMM(gemm_q5_K_q8_K_avx512vnni)
RVL_X86_GEMM(gemm_iq4_nl_q8_0_avx512vnni)
RVL_X86_GEMM(gemm_iq4_xs_q8_K_avx512vnni)
RVL_X86_GEMM(gemm_q2_K_q8_K_avx512vnni)
RVL_X86_GEMM(gemm_q3_K_q8_K_avx512vnni)
/* gemm16_avx512.c: prompt processing and decode on the 16-row layout
 * (formats.h gemm16) */
void gemm16_q4_0_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_iq4_nl_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                   size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q5_0_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q8_0_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_mxfp4_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                  size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q4_1_q8_1_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q5_1_q8_1_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q4_K_q8_K_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q5_K_q8_K_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_iq4_xs_q8_K_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                   size_t act_stride, int nt, float *y, size_t y_stride);
void gemm16_q6_K_q8_K_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride);
/* gemm_avx2.c: the same tiles with vpmaddubsw (AVX2 + FMA + F16C). */
RVL_X86_GEMM(gemm_q4_0_q8_0_avx2)
RVL_X86_GEMM(gemm_q4_1_q8_1_avx2)
RVL_X86_GEMM(gemm_q8_0_q8_0_avx2)
RVL_X86_GEMM(gemm_q4_K_q8_K_avx2)
RVL_X86_GEMM(gemm_q6_K_q8_K_avx2)
RVL_X86_GEMM(gemm_q5_0_q8_0_avx2)
RVL_X86_GEMM(gemm_q5_1_q8_1_avx2)
RVL_X86_GEMM(gemm_q5_K_q8_K_avx2)
RVL_X86_GEMM(gemm_iq4_nl_q8_0_avx2)
RVL_X86_GEMM(gemm_q2_K_q8_K_avx2)
RVL_X86_GEMM(gemm_q3_K_q8_K_avx2)
RVL_X86_GEMM(gemm_iq4_xs_q8_K_avx2)
/* gemm_float_avx512.c: F32, F16, BF16 tiles (AVX-512 F/BW/VL; BF16 also
 * with vdpbf16ps). */
RVL_X86_GEMM(gemm_f32_f32_avx512)
RVL_X86_GEMM(gemm_f16_f16_avx512)
RVL_X86_GEMM(gemm_bf16_bf16_avx512)
/* gemm_float_avx2.c: the same tiles on AVX2 + FMA + F16C. */
RVL_X86_GEMM(gemm_f32_f32_avx2)
RVL_X86_GEMM(gemm_f16_f16_avx2)
RVL_X86_GEMM(gemm_bf16_bf16_avx2)
#undef RVL_X86_GEMM

/* Turn a target on for every function defined up to RVL_X86_TARGET_END
 * (static inline helpers included). */
#define RVL_X86_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define RVL_X86_TARGET_BEGIN(t) \
    RVL_X86_PRAGMA(clang attribute push(__attribute__((target(t))), apply_to = function))
#define RVL_X86_TARGET_END _Pragma("clang attribute pop")
#else
#define RVL_X86_TARGET_BEGIN(t) _Pragma("GCC push_options") RVL_X86_PRAGMA(GCC target(t))
#define RVL_X86_TARGET_END _Pragma("GCC pop_options")
#endif

#endif

#endif
