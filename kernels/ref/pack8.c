/*
 * pack8.c - the packed decode layout of Q4_0 weights (formats.h gemv8):
 * RVL_GEMM_ROWS (8) rows of nb = n / 32 blocks, interleaved so that the
 * one-token GEMV reads them as one stream.
 *
 * A row-major GEMV over 8 rows gathers 16 nibble bytes from each of 8
 * rows 2304 bytes apart (n = 4096) for every block, and each row's f16
 * scales from 18-byte strides: on AVX-512 those gathers (vinserti32x4,
 * vpermw of unaligned 64-byte loads) were 45% of the kernel's time with
 * the weights in L2, and 8 interleaved streams per thread reach 85% of a
 * sequential read even with no arithmetic at all.
 *
 * The group is cut into superblocks of 4 blocks (the last one holds the
 * nb % 4 left, E blocks); superblock s starts at byte 576 * s and holds
 *   E * 8 f16 scales:      entry 8e + k = row k's d of block 4s + e
 *   E * 8 x 16 nibbles:    entry 8e + k = row k's qs of block 4s + e
 * so a full superblock is one 64-byte line of scales and 8 lines of
 * nibbles, 4 rows per line: the 8 rows' bytes, 8 * 18 * nb in all, in
 * a new order. Nothing else changes: the nibbles and scales are copied
 * as they are, and unpack8 restores the rows bit for bit.
 *
 * Q4_K (pack8_q4_K): the one-token kernel works on 4 rows at a time
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
#define P8_BLOCK 18  /* sizeof(block_q4_0) */
#define P8_SB 4      /* blocks per superblock */

/* Byte offsets, in the group, of row k's block i: its scale and its 16
 * nibble bytes. */
static size_t p8_base(int64_t i, int64_t nb, int64_t *e, int64_t *E)
{
    const int64_t s = i / P8_SB;
    *e = i % P8_SB;
    *E = nb - s * P8_SB < P8_SB ? nb - s * P8_SB : P8_SB;
    return (size_t)s * P8_SB * P8_ROWS * P8_BLOCK;
}

/* Copy between the 8 rows and the packed group, one way or the other. */
static void p8_copy(int64_t n, unsigned char *rows, size_t stride, unsigned char *group, bool pack)
{
    const int64_t nb = n / 32;
    for (int64_t i = 0; i < nb; i++) {
        int64_t e, E;
        const size_t b = p8_base(i, nb, &e, &E);
        for (int k = 0; k < P8_ROWS; k++) {
            unsigned char *blk = rows + (size_t)k * stride + (size_t)i * P8_BLOCK;
            unsigned char *d = group + b + (size_t)(e * P8_ROWS + k) * 2;
            unsigned char *qs = group + b + (size_t)E * P8_ROWS * 2 + (size_t)(e * P8_ROWS + k) * 16;
            if (pack) {
                memcpy(d, blk, 2);
                memcpy(qs, blk + 2, 16);
            } else {
                memcpy(blk, d, 2);
                memcpy(blk + 2, qs, 16);
            }
        }
    }
}

void pack8_q4_0(int64_t n, const void *rows, size_t stride, void *group)
{
    p8_copy(n, (unsigned char *)(uintptr_t)rows, stride, group, true);
}

void unpack8_q4_0(int64_t n, const void *group, void *rows, size_t stride)
{
    p8_copy(n, rows, stride, (unsigned char *)(uintptr_t)group, false);
}

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
