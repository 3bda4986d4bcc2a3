/*
 * attn_neon.c - the attention kernels (attn.h) on arm64 ASIMD: 4-lane
 * float vectors, f16 keys and values widened by fcvtl. The body is
 * kernels/attn_simd.h; this file supplies the vector primitives.
 */
#include "arm/arm.h"

#ifdef RVL_HAVE_NEON

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "attn.h"
#include "f16.h"

typedef float32x4_t VF;
#define W 4

static inline VF v_zero(void) { return vdupq_n_f32(0.0f); }
static inline VF v_set1(float x) { return vdupq_n_f32(x); }
static inline VF v_ld(const float *p) { return vld1q_f32(p); }
static inline VF v_ldh(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline void v_st(float *p, VF x) { vst1q_f32(p, x); }
static inline VF v_fma(VF a, VF b, VF c) { return vfmaq_f32(c, a, b); }
static inline VF v_mul(VF a, VF b) { return vmulq_f32(a, b); }
static inline VF v_add(VF a, VF b) { return vaddq_f32(a, b); }
static inline VF v_sub(VF a, VF b) { return vsubq_f32(a, b); }
static inline VF v_div(VF a, VF b) { return vdivq_f32(a, b); }
static inline VF v_max(VF a, VF b) { return vmaxq_f32(a, b); }
static inline VF v_abs(VF a) { return vabsq_f32(a); }
static inline VF v_sel_lt(VF a, VF b, VF x, VF y) { return vbslq_f32(vcltq_f32(a, b), x, y); }
static inline VF v_copysign(VF mag, VF sign)
{
    return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag);
}
static inline VF v_round(VF x) { return vrndnq_f32(x); }
static inline VF v_exp2i(VF n)
{
    const int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
static inline float v_hsum(VF x) { return vaddvq_f32(x); }
static inline float v_hmax(VF x) { return vmaxvq_f32(x); }
/* (a0+a1)+(a2+a3) for each of the four */
static inline void v_hsum4(VF a, VF b, VF c, VF d, float out[4])
{
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d)));
}

#define ATTN_ISA neon
#include "attn_simd.h"

#endif
