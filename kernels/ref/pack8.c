/*
 * pack8.c - the packed decode layout of Q4_K weights (formats.h gemv8):
 * RVL_GEMM_ROWS (8) rows interleaved so that the one-token GEMV reads
 * them as one stream instead of gathering pieces of 8 rows (Q4_0, IQ4_NL,
 * Q5_0 and Q8_0 have the 16-row layout of pack16.c instead, read by one
 * kernel for prompts and decode).
 *
 * The one-token kernel works on 4 rows at a time
 * (rows1_k4 in x86/gemm_avx512.c), with row k's 16-byte header (d, dmin,
 * 12 bytes of scales) in 128-bit lane k and the nibbles as 32-byte pieces
 * of two rows, row 2p in the low half of a vector and row 2p + 1 in the
 * high. The group keeps the 8 rows' blocks of 256 values together, block
 * i at byte 8 * 144 * i, and within it the 18 vectors in the order the
 * kernel reads them, 64 bytes each:
 *   2 lines of headers:   line g, bytes 16k..16k+15 = row 4g + k's header
 *   4 x 4 lines of qs:    line 2 + 4c + p = row 2p's qs[32c..32c+31],
 *                         then row 2p + 1's
 * Again only the order changes. (Q5_K the same way, with its qh as 4
 * lines of row pairs after the headers, was 11% faster hot in L2 but 3-10
 * points of the roofline slower streaming at 11008x4096 on 2 threads,
 * whatever the prefetch: not packed.)
 */
#include "formats.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define P8_ROWS 8

/* Q4_K: the packed offset, in the group's block, of the 16-byte header
 * (j = 0) or of the 32-byte qs piece j - 1 of row k (the layout at the
 * top); pieces start in the row's block at 16 + 32 * (j - 1). */
#define K8_BLOCK 144 /* sizeof(block_q4_K) */
static size_t k8_off(int k, int j)
{
    if (j == 0)
        return (size_t)(k / 4) * 64 + (size_t)(k % 4) * 16;
    return 128 + 256 * (size_t)(j - 1) + (size_t)(k / 2) * 64 + (size_t)(k % 2) * 32;
}

void pack8_q4_K(int64_t n, const void *rows, size_t stride, void *group)
{
    const unsigned char *src = rows;
    unsigned char *dst = group;
    for (int64_t i = 0; i < n / 256; i++)
        for (int k = 0; k < P8_ROWS; k++) {
            const unsigned char *blk = src + (size_t)k * stride + (size_t)i * K8_BLOCK;
            unsigned char *g = dst + (size_t)i * P8_ROWS * K8_BLOCK;
            memcpy(g + k8_off(k, 0), blk, 16);
            for (int j = 1; j <= 4; j++)
                memcpy(g + k8_off(k, j), blk + 16 + 32 * (j - 1), 32);
        }
}

void unpack8_q4_K(int64_t n, const void *group, void *rows, size_t stride)
{
    const unsigned char *src = group;
    unsigned char *dst = rows;
    for (int64_t i = 0; i < n / 256; i++)
        for (int k = 0; k < P8_ROWS; k++) {
            unsigned char *blk = dst + (size_t)k * stride + (size_t)i * K8_BLOCK;
            const unsigned char *g = src + (size_t)i * P8_ROWS * K8_BLOCK;
            memcpy(blk, g + k8_off(k, 0), 16);
            for (int j = 1; j <= 4; j++)
                memcpy(blk + 16 + 32 * (j - 1), g + k8_off(k, j), 32);
        }
}
