/*
 * common.h - AVX2 helpers shared by the kernels/x86/ files. Include after
 * RVL_X86_TARGET_BEGIN: they are static inline and compile for the
 * including file's target (AVX2 at least).
 *
 * Block data is only byte-aligned (formats.h): every load is unaligned.
 */
#ifndef RVL_KERNELS_X86_COMMON_H
#define RVL_KERNELS_X86_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "formats.h"

/* Weight rows are streamed once per token from memory much larger than
 * the caches; on the machines measured, the hardware prefetcher alone
 * leaves GEMV at a third of the memory bandwidth. The kernels prefetch
 * this far ahead of the block they read (past the end of the row is
 * fine: the rows of a matrix follow each other, and a prefetch never
 * faults). */
#define RVL_PREFETCH_AHEAD 2048

static inline void prefetch_ahead(const void *p)
{
    _mm_prefetch((const char *)p + RVL_PREFETCH_AHEAD, _MM_HINT_T0);
}

/* Every cache line of a block of `size` bytes, RVL_PREFETCH_AHEAD on. */
static inline void prefetch_block(const void *p, size_t size)
{
    for (size_t o = 0; o < size; o += 64)
        prefetch_ahead((const char *)p + o);
}

static inline __m256i ld256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i ld128(const void *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

static inline float f16s(rvl_f16 h)
{
    return _cvtsh_ss(h);
}

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 nibbles of a 16-byte Q4-style field in element order: byte j's
 * low nibble is element j, its high nibble element j + 16. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    /* one broadcast load (no shuffle-port insert), the high half shifted */
    const __m256i v = _mm256_broadcastsi128_si256(ld128(qs));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                            _mm256_set1_epi8(0x0F));
}

/* 0xFF in byte j where bit j of the little-endian u32 at p is set. */
static inline __m256i bits32_mask(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                              0x0303030303030303ll);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* 16 16-bit values, each repeated in a 32-bit lane, as two vectors of 8
 * lanes (values 0-7, 8-15); input: 16 int16 in a 256-bit vector. Lane j
 * of a pair vector then broadcasts with pick_pair(). */
static inline void dup16_lanes(__m256i v16, __m256i *lo, __m256i *hi)
{
    const __m256i a = _mm256_unpacklo_epi16(v16, v16); /* 0-3 | 8-11 */
    const __m256i b = _mm256_unpackhi_epi16(v16, v16); /* 4-7 | 12-15 */
    *lo = _mm256_permute2x128_si256(a, b, 0x20);
    *hi = _mm256_permute2x128_si256(a, b, 0x31);
}

/* A vector whose low 128 bits hold value j of a dup16_lanes vector (8
 * times, as int16) and whose high 128 bits hold value k. */
static inline __m256i pick2(__m256i dup, int j, int k)
{
    return _mm256_permutevar8x32_epi32(dup, _mm256_setr_epi32(j, j, j, j, k, k, k, k));
}

#endif
