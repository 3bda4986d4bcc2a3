/*
 * common.h - NEON helpers shared by the kernels/arm/ files (static inline,
 * compiled for the including file's target).
 *
 * Including it turns off floating-point contraction for the rest of the
 * file: the kernels reproduce ref's float operations one rounding at a
 * time (a*b+c must not become an FMA); the dot products ask for FMA
 * explicitly (vfmaq_f32) where they accumulate in lanes.
 *
 * Block data is only byte-aligned (formats.h): every load of block data
 * is a byte load (vld1q_u8) reinterpreted, never a cast pointer.
 */
#ifndef RVL_KERNELS_ARM_COMMON_H
#define RVL_KERNELS_ARM_COMMON_H

#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "formats.h"

/* Weight rows stream once per token from memory much larger than the
 * caches: prefetch this far ahead of the block being read (past the end
 * of the row is fine: the rows of a matrix follow each other, and PRFM
 * never faults). Same distance as the x86 kernels. */
#define RVL_PREFETCH_AHEAD 2048

static inline void prefetch_ahead(const void *p)
{
    __builtin_prefetch((const char *)p + RVL_PREFETCH_AHEAD);
}

/* Every cache line of a block of `size` bytes, RVL_PREFETCH_AHEAD on. */
static inline void prefetch_block(const void *p, size_t size)
{
    for (size_t o = 0; o < size; o += 64)
        prefetch_ahead((const char *)p + o);
}

/* f16 <-> f32 through the FPU (fcvt): exact one way, round to nearest
 * even the other, NaN payloads kept (a signaling NaN comes out quiet). */
static inline float f16s(rvl_f16 h)
{
    __fp16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static inline rvl_f16 f16_of(float x)
{
    const __fp16 f = (__fp16)x;
    rvl_f16 h;
    memcpy(&h, &f, 2);
    return h;
}

static inline int8x16_t ld_s8(const void *p)
{
    return vreinterpretq_s8_u8(vld1q_u8((const uint8_t *)p));
}

static inline int16x8_t ld_s16(const void *p)
{
    return vreinterpretq_s16_u8(vld1q_u8((const uint8_t *)p));
}

static inline int8x16_t as_s8(uint8x16_t v)
{
    return vreinterpretq_s8_u8(v);
}

/* 0xFF in byte j where bit j of the little-endian 16-bit field at p is
 * set (Q5 high bits: elements 0-15 from qh bytes 0-1, 16-31 from 2-3). */
static inline uint8x16_t bits16_mask(const uint8_t *p)
{
    static const uint8_t sel[16] = { 1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128 };
    const uint8x16_t v = vcombine_u8(vdup_n_u8(p[0]), vdup_n_u8(p[1]));
    return vtstq_u8(v, vld1q_u8(sel));
}

/* The 8 6-bit scales and 8 6-bit mins of a Q4_K/Q5_K block (ref.h's
 * rvl_k4_scale_min, four at a time). */
static inline void k4_scales_mins(const uint8_t *s, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t v[4] = {
        u[0] & 0x3f3f3f3f,
        (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030),
        u[1] & 0x3f3f3f3f,
        ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030),
    };
    memcpy(sc, v, 8);
    memcpy(mn, v + 2, 8);
}

/* The 16 signed 6-bit scales of a Q3_K block (ref.h's rvl_q3_K_scales). */
static inline void q3_K_scales(const uint8_t *s, int8_t out[16])
{
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
    const uint32_t v[4] = {
        (u[0] & lo4) | ((u[2] & hi2) << 4),
        (u[1] & lo4) | (((u[2] >> 2) & hi2) << 4),
        ((u[0] >> 4) & lo4) | (((u[2] >> 4) & hi2) << 4),
        ((u[1] >> 4) & lo4) | (((u[2] >> 6) & hi2) << 4),
    };
    vst1q_s8(out, vsubq_s8(ld_s8(v), vdupq_n_s8(32)));
}

/* The 128 levels (minus 32) of half h of a Q6_K block, in element order,
 * from ql = block.ql + 64h and qh = block.qh + 32h: element l of the half
 * (l < 32) is ql[l] low | qh[l] bits 0-1 << 4; l + 32: ql[l + 32] low |
 * bits 2-3; l + 64: ql[l] high | bits 4-5; l + 96: ql[l + 32] high |
 * bits 6-7. lv[g] holds group g (elements 16g .. 16g + 15). */
static inline void q6_K_half(const uint8_t *ql, const uint8_t *qh, int8x16_t lv[8])
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03), mc = vdupq_n_u8(0x0C);
    const uint8x16_t m30 = vdupq_n_u8(0x30), mc0 = vdupq_n_u8(0xC0);
    const uint8x16_t la = vld1q_u8(ql), lb = vld1q_u8(ql + 16);
    const uint8x16_t lc = vld1q_u8(ql + 32), ld = vld1q_u8(ql + 48);
    const uint8x16_t ha = vld1q_u8(qh), hb = vld1q_u8(qh + 16);
    const uint8x16_t u[8] = {
        vorrq_u8(vandq_u8(la, m4), vshlq_n_u8(vandq_u8(ha, m3), 4)),
        vorrq_u8(vandq_u8(lb, m4), vshlq_n_u8(vandq_u8(hb, m3), 4)),
        vorrq_u8(vandq_u8(lc, m4), vshlq_n_u8(vandq_u8(ha, mc), 2)),
        vorrq_u8(vandq_u8(ld, m4), vshlq_n_u8(vandq_u8(hb, mc), 2)),
        vorrq_u8(vshrq_n_u8(la, 4), vandq_u8(ha, m30)),
        vorrq_u8(vshrq_n_u8(lb, 4), vandq_u8(hb, m30)),
        vorrq_u8(vshrq_n_u8(lc, 4), vshrq_n_u8(vandq_u8(ha, mc0), 2)),
        vorrq_u8(vshrq_n_u8(ld, 4), vshrq_n_u8(vandq_u8(hb, mc0), 2)),
    };
    for (int g = 0; g < 8; g++)
        lv[g] = vsubq_s8(as_s8(u[g]), vdupq_n_s8(32));
}

#endif
