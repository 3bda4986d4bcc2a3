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
