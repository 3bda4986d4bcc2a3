/*
 * arm.h - the arm64 kernel variants (kernels/arm/), named <op>_<format>_<isa>
 * like the reference kernels they replace. dispatch.c maps them to the
 * NEON table's slots; tests/neon/test_kernels_neon.c compares each one
 * with ref (under qemu-aarch64 on x86 hosts, `make check`).
 *
 *   _neon      ASIMD (every arm64 Linux CPU)                    (neon.c)
 *   _dotprod   ASIMD + the ARMv8.2 dot product (sdot)         (dotprod.c)
 *
 * dotprod.c turns its target on for its own functions only (pragma), so
 * the binary still runs on an ARMv8.0 core: dispatch.c installs the
 * _dotprod kernels only when HWCAP says the CPU has them.
 *
 * Numerical contract, stronger than dispatch.h's: every integer dot
 * product (the quantized formats) computes the exact integer sum of each
 * block or group like ref and then does ref's float operations in ref's
 * order, so it returns ref's bits; the F32/F16/BF16 dots accumulate in
 * float lanes with FMA and agree with ref within dispatch.h's bound. The
 * quantizers and dequantizers give ref's bytes (F16 signaling NaNs come
 * out quiet, as on x86).
 */
#ifndef RVL_KERNELS_ARM_H
#define RVL_KERNELS_ARM_H

#include "formats.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#define RVL_HAVE_NEON 1


/* Integer dot products (int_dots.h, compiled once per target). */
RVL_DECL_INT_DOTS(neon)
RVL_DECL_INT_DOTS(dotprod)

/* Tiled GEMM (formats.h gemm slot; gemm.h, compiled once per target):
 * ref's bits for every (row, token), like the integer dots. */
#define RVL_DECL_ARM_GEMM1(name, isa)                                              \
    void name##_##isa(int64_t n, const void *w, size_t w_stride, int nr,           \
                      const void *act, size_t act_stride, int nt, float *y,        \
                      size_t y_stride);
#define RVL_DECL_ARM_GEMM(isa)                                                     \
    RVL_DECL_ARM_GEMM1(gemm_q4_0_q8_0, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q4_1_q8_1, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q8_0_q8_0, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q4_K_q8_K, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q6_K_q8_K, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q5_0_q8_0, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q5_1_q8_1, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q5_K_q8_K, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_iq4_nl_q8_0, isa)                                      \
    RVL_DECL_ARM_GEMM1(gemm_iq4_xs_q8_K, isa)                                      \
    RVL_DECL_ARM_GEMM1(gemm_q2_K_q8_K, isa)                                        \
    RVL_DECL_ARM_GEMM1(gemm_q3_K_q8_K, isa)
RVL_DECL_ARM_GEMM(neon)
RVL_DECL_ARM_GEMM(dotprod)
#undef RVL_DECL_ARM_GEMM
#undef RVL_DECL_ARM_GEMM1

/* neon.c: plain-type dots, activation quantizers, dequantizers. */
float vec_dot_f32_f32_neon(int64_t n, const void *w, const void *a);
float vec_dot_f16_f16_neon(int64_t n, const void *w, const void *a);
float vec_dot_bf16_bf16_neon(int64_t n, const void *w, const void *a);
void quantize_q8_0_neon(const float *x, void *y, int64_t n, const float *qw);
void quantize_q8_1_neon(const float *x, void *y, int64_t n, const float *qw);
void quantize_q8_K_neon(const float *x, void *y, int64_t n, const float *qw);
void quantize_f16_neon(const float *x, void *y, int64_t n, const float *qw);
void quantize_bf16_neon(const float *x, void *y, int64_t n, const float *qw);
void dequantize_f16_neon(const void *x, float *y, int64_t n);
void dequantize_bf16_neon(const void *x, float *y, int64_t n);
void dequantize_q4_0_neon(const void *x, float *y, int64_t n);
void dequantize_q4_1_neon(const void *x, float *y, int64_t n);
void dequantize_q8_0_neon(const void *x, float *y, int64_t n);
void dequantize_q4_K_neon(const void *x, float *y, int64_t n);
void dequantize_q6_K_neon(const void *x, float *y, int64_t n);

#endif

#endif
