/*
 * f16.h - IEEE half (binary16) and bfloat16 conversions, scalar and exact.
 *
 * fp32 -> fp16 rounds to nearest, ties to even, with gradual underflow to
 * subnormals and overflow to infinity: the same bits as the F16C instruction
 * VCVTPS2PH (imm 0), ggml's GGML_FP32_TO_FP16 and numpy's astype(float16).
 * NaN stays NaN (quiet, sign kept). fp16 -> fp32 is exact.
 *
 * fp32 -> bf16 rounds to nearest even and quiets NaNs exactly like ggml's
 * ggml_compute_fp32_to_bf16 and gguf-py's BF16.quantize; bf16 -> fp32 is a
 * shift.
 *
 * Header-only so every kernel file inlines them. No tables: the SIMD
 * variants use hardware conversion where they can.
 */
#ifndef RVL_F16_H
#define RVL_F16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t rvl_f16;   /* IEEE binary16 bits, little-endian in files */
typedef uint16_t rvl_bf16;  /* bfloat16 bits */

static inline uint32_t rvl_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rvl_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float rvl_f16_to_f32(rvl_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f)                     /* inf / NaN: widen the payload */
        return rvl_bits_f32(sign | 0x7f800000 | (mant << 13));
    if (exp != 0)                        /* normal: rebias 15 -> 127 */
        return rvl_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return rvl_bits_f32(sign);
    /* subnormal: mant * 2^-24, normalise into an fp32 normal */
    exp = 113;
    while (!(mant & 0x400)) {
        mant <<= 1;
        exp--;
    }
    return rvl_bits_f32(sign | (exp << 23) | ((mant & 0x3ff) << 13));
}

static inline rvl_f16 rvl_f32_to_f16(float f)
{
    uint32_t x = rvl_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;

    if (ax > 0x7f800000)                 /* NaN: quiet, keep top payload bits */
        return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
    if (ax >= 0x47800000)                /* >= 65536 (or inf): infinity */
        return sign | 0x7c00;
    if (ax >= 0x38800000) {              /* result is an fp16 normal (>= 2^-14) */
        uint32_t r = ax - (112u << 23);  /* rebias exponent 127 -> 15 */
        r += 0xfff + ((r >> 13) & 1);    /* round to nearest even on bit 13; a carry
                                            moves to the next binade or to inf */
        return sign | (uint16_t)(r >> 13);
    }
    uint32_t e = ax >> 23;
    if (e < 102)                         /* below 2^-25: rounds to zero */
        return sign;
    /* subnormal result: value / 2^-24 rounded to nearest even */
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;            /* 14 .. 24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return sign | (uint16_t)q;
}

static inline float rvl_bf16_to_f32(rvl_bf16 h)
{
    return rvl_bits_f32((uint32_t)h << 16);
}

static inline rvl_bf16 rvl_f32_to_bf16(float f)
{
    uint32_t x = rvl_f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000)   /* NaN: force quiet */
        return (rvl_bf16)((x >> 16) | 64);
    return (rvl_bf16)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
