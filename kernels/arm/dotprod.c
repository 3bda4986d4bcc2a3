/*
 * dotprod.c - the integer dot products (int_dots.h) on the ARMv8.2 dot
 * product instruction: sdot adds four int8 products into each int32 lane.
 *
 * The target is switched on for this file's functions only, so the rest
 * of the binary stays ARMv8.0: dispatch.c installs these kernels when
 * HWCAP_ASIMDDP is set. Results are ref's bits, like the _neon ones.
 */
#include "arm/arm.h"

#ifdef RVL_HAVE_NEON

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif

#include "arm/common.h"

/* clang before 16 declares vdotq_s32 only when the whole file is built
 * for dotprod (__ARM_FEATURE_DOTPROD), not under a target attribute */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t y)
{
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD) && __clang_major__ < 16
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(x), "w"(y));
    return acc;
#else
    return vdotq_s32(acc, x, y);
#endif
}

#define RVL_ISA_SFX dotprod
#include "arm/int_dots.h"
#include "arm/gemm.h"
#undef RVL_ISA_SFX

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
